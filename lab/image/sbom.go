package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"runtime/debug"
	"strings"
	"time"
)

// SBOM is the subset of an SPDX 2.3 JSON document this tool writes: one
// package for the binary, one per Go module it links (with its go.sum hash)
// and one for the Go standard library, each with a purl.
type SBOM struct {
	SPDXVersion       string         `json:"spdxVersion"`
	DataLicense       string         `json:"dataLicense"`
	SPDXID            string         `json:"SPDXID"`
	Name              string         `json:"name"`
	DocumentNamespace string         `json:"documentNamespace"`
	CreationInfo      CreationInfo   `json:"creationInfo"`
	Packages          []Package      `json:"packages"`
	Relationships     []Relationship `json:"relationships"`
}

type CreationInfo struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type Package struct {
	Name             string        `json:"name"`
	SPDXID           string        `json:"SPDXID"`
	VersionInfo      string        `json:"versionInfo"`
	DownloadLocation string        `json:"downloadLocation"`
	FilesAnalyzed    bool          `json:"filesAnalyzed"`
	LicenseConcluded string        `json:"licenseConcluded"`
	LicenseDeclared  string        `json:"licenseDeclared"`
	CopyrightText    string        `json:"copyrightText"`
	Checksums        []Checksum    `json:"checksums,omitempty"`
	Comment          string        `json:"comment,omitempty"`
	ExternalRefs     []ExternalRef `json:"externalRefs"`
}

type Checksum struct {
	Algorithm     string `json:"algorithm"`
	ChecksumValue string `json:"checksumValue"`
}

type ExternalRef struct {
	ReferenceCategory string `json:"referenceCategory"`
	ReferenceType     string `json:"referenceType"`
	ReferenceLocator  string `json:"referenceLocator"`
}

type Relationship struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

// NewSBOM describes the binary whose build information is bi (read from the
// file itself, debug/buildinfo) and whose bytes hash to binSHA256. version is
// the release version stamped into it; source the repository's URL.
func NewSBOM(bi *debug.BuildInfo, binSHA256 []byte, name, version, source string, created time.Time) *SBOM {
	noassert := "NOASSERTION"
	mainID := "SPDXRef-Package-tidemark"
	doc := &SBOM{
		SPDXVersion: "SPDX-2.3", DataLicense: "CC0-1.0", SPDXID: "SPDXRef-DOCUMENT",
		Name:              name,
		DocumentNamespace: source + "/spdx/" + name + "-" + hex.EncodeToString(binSHA256),
		CreationInfo: CreationInfo{
			Created:  created.UTC().Format(time.RFC3339),
			Creators: []string{"Tool: tidemark-lab-image", "Organization: tidemark"},
		},
	}
	var settings []string
	for _, s := range bi.Settings {
		settings = append(settings, s.Key+"="+s.Value)
	}
	doc.Packages = append(doc.Packages, Package{
		Name: bi.Path, SPDXID: mainID, VersionInfo: "v" + version,
		DownloadLocation: source, LicenseConcluded: noassert, LicenseDeclared: "Apache-2.0", CopyrightText: noassert,
		Checksums: []Checksum{{Algorithm: "SHA256", ChecksumValue: hex.EncodeToString(binSHA256)}},
		Comment:   "module " + bi.Main.Path + "; go build settings: " + strings.Join(settings, " "),
		ExternalRefs: []ExternalRef{{ReferenceCategory: "PACKAGE-MANAGER", ReferenceType: "purl",
			ReferenceLocator: "pkg:golang/" + bi.Main.Path + "@v" + version}},
	})
	doc.Relationships = append(doc.Relationships, Relationship{"SPDXRef-DOCUMENT", "DESCRIBES", mainID})
	add := func(path, ver, sum string) {
		id := fmt.Sprintf("SPDXRef-Package-go-%d", len(doc.Packages))
		p := Package{
			Name: path, SPDXID: id, VersionInfo: ver,
			DownloadLocation: noassert, LicenseConcluded: noassert, LicenseDeclared: noassert, CopyrightText: noassert,
			ExternalRefs: []ExternalRef{{ReferenceCategory: "PACKAGE-MANAGER", ReferenceType: "purl",
				ReferenceLocator: "pkg:golang/" + path + "@" + ver}},
		}
		if sum != "" {
			p.Comment = "go.sum " + sum
		}
		doc.Packages = append(doc.Packages, p)
		doc.Relationships = append(doc.Relationships, Relationship{mainID, "DEPENDS_ON", id})
	}
	add("stdlib", bi.GoVersion, "")
	for _, m := range bi.Deps {
		if m.Replace != nil { // what was linked is the replacement
			m = m.Replace
		}
		add(m.Path, m.Version, m.Sum)
	}
	return doc
}

// JSON is the document, indented.
func (s *SBOM) JSON() []byte {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil { // plain structs of strings: cannot happen
		panic(err)
	}
	return append(b, '\n')
}

func sha256Of(b []byte) []byte {
	h := sha256.Sum256(b)
	return h[:]
}
