package main

import (
	"archive/tar"
	"bytes"
	"debug/buildinfo"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestImage builds the image for this machine's architecture into a temp
// directory, as `make image` does, and reads it back with
// go-containerregistry: the layout's tag, the config (user, entrypoint,
// labels), the layer's binary (the product's, run with `version`) and the
// SBOM (every direct requirement in go.mod that the binary links, at
// go.mod's version, and nothing the binary does not link).
func TestImage(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := configFor(root, t.TempDir(), "linux/"+runtime.GOARCH)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("built %s: index %s, image %s, %d B compressed, SBOM %d packages",
		res.Ref, res.Index, res.Images[0].Digest, res.Images[0].Size, res.Images[0].SBOMCount)

	// The layout: index.json names the tag and points at the index.
	lp, err := layout.FromPath(res.Layout)
	if err != nil {
		t.Fatal(err)
	}
	top, err := lp.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	tm, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(tm.Manifests) != 2 {
		t.Fatalf("index.json has %d manifests, want the index and the SBOM referrer", len(tm.Manifests))
	}
	wantRef := cfg.Repository + ":" + cfg.Tag
	if got := tm.Manifests[0].Annotations["org.opencontainers.image.ref.name"]; got != wantRef || tm.Manifests[0].Digest != res.Index {
		t.Fatalf("index.json names %q at %s, want %q at %s", got, tm.Manifests[0].Digest, wantRef, res.Index)
	}
	if !strings.HasPrefix(cfg.Tag, cfg.Version) {
		t.Fatalf("tag %q does not start with the CHANGELOG's version %q", cfg.Tag, cfg.Version)
	}
	idx, err := top.ImageIndex(res.Index)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].Platform == nil ||
		im.Manifests[0].Platform.OS != "linux" || im.Manifests[0].Platform.Architecture != runtime.GOARCH {
		t.Fatalf("index manifests %+v, want one linux/%s", im.Manifests, runtime.GOARCH)
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}

	// The config.
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if c.User != "65532:65532" || !slices.Equal(c.Entrypoint, []string{"/tidemark"}) || cf.Architecture != runtime.GOARCH || cf.OS != "linux" {
		t.Errorf("config: user %q entrypoint %q platform %s/%s, want 65532:65532 [/tidemark] linux/%s", c.User, c.Entrypoint, cf.OS, cf.Architecture, runtime.GOARCH)
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.version":  cfg.Tag,
		"org.opencontainers.image.revision": cfg.Revision,
		"org.opencontainers.image.source":   "https://github.com/tidemark/tidemark",
	} {
		if got := c.Labels[k]; got != want {
			t.Errorf("label %s = %q, want %q", k, got, want)
		}
	}

	// The layer's files.
	files := layerFiles(t, img)
	bin, sbomIn := files["tidemark"], files[strings.TrimPrefix(SBOMPath, "/")]
	if bin == nil || sbomIn == nil || !bytes.Contains(files["etc/passwd"], []byte(":65532:65532:")) {
		t.Fatalf("the layer lacks the binary, the SBOM or the nonroot user; it holds %v", keys(files))
	}
	bi, err := buildinfo.Read(bytes.NewReader(bin))
	if err != nil {
		t.Fatal(err)
	}
	if bi.Path != "github.com/tidemark/tidemark/cmd/tidemark" || !slices.Contains(bi.Settings, buildSetting("CGO_ENABLED", "0")) {
		t.Errorf("the image's binary is %s (settings %v), want the static product binary github.com/tidemark/tidemark/cmd/tidemark", bi.Path, bi.Settings)
	}
	exe := filepath.Join(t.TempDir(), "tidemark")
	if err := os.WriteFile(exe, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(exe, "version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "v"+cfg.Tag) || !strings.Contains(string(out), cfg.Revision) {
		t.Errorf("the image's tidemark version: %v\n%s\nwant v%s and %s", err, out, cfg.Tag, cfg.Revision)
	}

	// The SBOM, inside and beside.
	beside, err := os.ReadFile(res.Images[0].SBOMPath)
	if err != nil || !bytes.Equal(beside, sbomIn) {
		t.Fatalf("the SBOM beside the layout (%v) differs from the image's %s", err, SBOMPath)
	}
	// The SBOM as an OCI referrer of the image, listed in index.json.
	art, err := lp.Image(tm.Manifests[1].Digest)
	if err != nil {
		t.Fatal(err)
	}
	am, err := art.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if am.ArtifactType != SBOMType || am.Subject == nil || am.Subject.Digest != im.Manifests[0].Digest || len(am.Layers) != 1 {
		t.Fatalf("index.json's second manifest %+v, want an %s artifact whose subject is the image %s", am, SBOMType, im.Manifests[0].Digest)
	}
	ab, err := lp.Blob(am.Layers[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	refSBOM, err := io.ReadAll(ab)
	if err != nil || !bytes.Equal(refSBOM, sbomIn) {
		t.Fatalf("the SBOM referrer's blob (%v) differs from the image's %s", err, SBOMPath)
	}

	var doc SBOM
	if err := json.Unmarshal(sbomIn, &doc); err != nil {
		t.Fatal(err)
	}
	listed := map[string]string{}
	for _, p := range doc.Packages {
		listed[p.Name] = p.VersionInfo
	}
	linked := linkedModules(t, root)
	checked := 0
	for _, r := range directRequirements(t, root) {
		v, ok := listed[r.Path]
		switch {
		case linked[r.Path] && v != r.Version:
			t.Errorf("SBOM lists %s at %q, want go.mod's %s", r.Path, v, r.Version)
		case !linked[r.Path] && ok:
			t.Errorf("SBOM lists %s %s, which the product binary does not link", r.Path, v)
		}
		if linked[r.Path] {
			checked++
		}
	}
	if checked < 10 || doc.SPDXVersion != "SPDX-2.3" || listed["stdlib"] != runtime.Version() {
		t.Errorf("SBOM %s checked against %d direct requirements, stdlib %q; want SPDX-2.3, at least 10, %s", doc.SPDXVersion, checked, listed["stdlib"], runtime.Version())
	}

	// The docker tarball holds the same image under the tag.
	tag, err := name.NewTag(wantRef)
	if err != nil {
		t.Fatal(err)
	}
	timg, err := tarball.ImageFromPath(res.DockerTar, &tag)
	if err != nil {
		t.Fatal(err)
	}
	// docker's format rewrites the manifest (docker media types), so the
	// config and the layer are what must match.
	tc, _ := timg.ConfigName()
	lc, _ := img.ConfigName()
	tl, _ := timg.LayerByDiffID(cf.RootFS.DiffIDs[0])
	if tc != lc || tl == nil {
		t.Errorf("docker tarball: config %s and layer %v, want the layout's config %s and layer %s", tc, tl, lc, cf.RootFS.DiffIDs[0])
	}
}

// TestVersionsAgree: the CHANGELOG's released version is the chart's
// version and appVersion, and the image tag the chart deploys (values.yaml
// image.tag, empty meaning appVersion), so `make image` at the release tag
// builds the image the chart names.
func TestVersionsAgree(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	changelog, err := os.ReadFile(filepath.Join(root, "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	v, err := ChangelogVersion(changelog)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ReadChart(root)
	if err != nil {
		t.Fatal(err)
	}
	tag := c.Tag
	if tag == "" {
		tag = c.AppVersion
	}
	if c.Version != v || c.AppVersion != v || tag != v {
		t.Errorf("CHANGELOG.md releases %s; the chart has version %q, appVersion %q, image tag %q: want all %s", v, c.Version, c.AppVersion, tag, v)
	}
	if c.Repository != "ghcr.io/tidemark/tidemark" {
		t.Errorf("the chart's image.repository %q, want ghcr.io/tidemark/tidemark", c.Repository)
	}
}

func TestChangelogVersion(t *testing.T) {
	v, err := ChangelogVersion([]byte("# Changelog\n\n## [Unreleased]\n\n- x\n\n## [1.2.3] - 2026-12-01\n\n## [1.2.2] - 2026-11-01\n"))
	if err != nil || v != "1.2.3" {
		t.Errorf("ChangelogVersion = %q, %v; want 1.2.3", v, err)
	}
	if v, err := ChangelogVersion([]byte("# Changelog\n\n## [Unreleased]\n")); err == nil {
		t.Errorf("ChangelogVersion with no release = %q, want an error", v)
	}
}

func buildSetting(k, v string) debug.BuildSetting { return debug.BuildSetting{Key: k, Value: v} }

func layerFiles(t *testing.T, img v1.Image) map[string][]byte {
	t.Helper()
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("image layers: %d, %v; want 1", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files[h.Name] = b
		}
	}
}

func keys(m map[string][]byte) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

type requirement struct{ Path, Version string }

// directRequirements is go.mod's require list without the // indirect ones.
func directRequirements(t *testing.T, root string) []requirement {
	t.Helper()
	cmd := exec.Command("go", "mod", "edit", "-json")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go mod edit -json: %v", err)
	}
	var mod struct {
		Require []struct {
			Path, Version string
			Indirect      bool
		}
	}
	if err := json.Unmarshal(out, &mod); err != nil {
		t.Fatal(err)
	}
	var rs []requirement
	for _, r := range mod.Require {
		if !r.Indirect {
			rs = append(rs, requirement{r.Path, r.Version})
		}
	}
	return rs
}

// linkedModules is the set of modules the product binary's packages come from.
func linkedModules(t *testing.T, root string) map[string]bool {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-f", "{{with .Module}}{{.Path}}{{end}}", "./cmd/tidemark")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps ./cmd/tidemark: %v", err)
	}
	m := map[string]bool{}
	for _, p := range strings.Fields(string(out)) {
		m[p] = true
	}
	delete(m, "github.com/tidemark/tidemark")
	return m
}
