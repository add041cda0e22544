package main

import (
	"archive/tar"
	"bytes"
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's fixed parts; the Dockerfile ships the same (distroless
// static's nonroot user, /tidemark, the ports).
const (
	BinaryPath = "/tidemark"
	SBOMPath   = "/usr/share/doc/tidemark/sbom.spdx.json"
	User       = "65532:65532"
)

var ports = []string{"8080/tcp", "9101/tcp", "9102/tcp", "9103/tcp"}

// Config says what to build.
type Config struct {
	Root       string        // the repository (holds go.mod)
	Out        string        // the output directory, replaced whole
	Version    string        // the release version, X.Y.Z (CHANGELOG.md)
	Tag        string        // the image tag (ImageTag)
	Revision   string        // the commit
	Repository string        // the image repository (the chart's values.yaml)
	Source     string        // the repository URL, for the source label
	Platforms  []v1.Platform // linux/amd64, linux/arm64
	Created    time.Time     // the commit's time: same commit, same digests
}

// Built is one platform's image.
type Built struct {
	Platform   v1.Platform
	Digest     v1.Hash // the image manifest's
	Size       int64   // manifest + config + layer, as stored (compressed)
	BinarySize int64
	SBOMPath   string // beside the layout
	SBOMCount  int    // packages in the SBOM
	SBOM       []byte
	Manifest   v1.Descriptor // the image manifest's descriptor
	Referrer   v1.Hash       // the SBOM artifact's manifest (subject: the image)
}

// Result is what Build wrote.
type Result struct {
	Ref        string  // repository:tag
	Index      v1.Hash // the multi-platform index's digest
	Layout     string  // the OCI layout directory
	DockerTar  string  // `docker load` tarball of the first platform
	Images     []Built
	LayoutSize int64 // bytes of every blob in the layout
}

// Build compiles the product binary for each platform, builds one image per
// platform (no base image: the binary, the nonroot user's passwd/group
// entries and the SBOM), an index over them, and writes the OCI layout and
// a docker tarball under cfg.Out.
func Build(cfg Config) (*Result, error) {
	if err := os.RemoveAll(cfg.Out); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return nil, err
	}
	ref, err := name.NewTag(cfg.Repository + ":" + cfg.Tag)
	if err != nil {
		return nil, fmt.Errorf("image reference: %w", err)
	}
	labels := map[string]string{
		"org.opencontainers.image.title":    "tidemark",
		"org.opencontainers.image.version":  cfg.Tag,
		"org.opencontainers.image.revision": cfg.Revision,
		"org.opencontainers.image.source":   cfg.Source,
		"org.opencontainers.image.licenses": "Apache-2.0",
		"org.opencontainers.image.created":  cfg.Created.UTC().Format(time.RFC3339),
	}
	res := &Result{Ref: ref.String(), Layout: filepath.Join(cfg.Out, "oci")}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	var first v1.Image
	for _, p := range cfg.Platforms {
		img, b, err := buildOne(cfg, p, labels)
		if err != nil {
			return nil, fmt.Errorf("%s/%s: %w", p.OS, p.Architecture, err)
		}
		if first == nil {
			first = img
		}
		res.Images = append(res.Images, *b)
		p := p
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
	}
	idx = mutate.Annotations(idx, labels).(v1.ImageIndex)
	if res.Index, err = idx.Digest(); err != nil {
		return nil, err
	}
	lp, err := layout.Write(res.Layout, empty.Index)
	if err != nil {
		return nil, fmt.Errorf("write the OCI layout: %w", err)
	}
	if err := lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": ref.String(),
	})); err != nil {
		return nil, fmt.Errorf("write the OCI layout: %w", err)
	}
	for i := range res.Images {
		if res.Images[i].Referrer, err = appendSBOM(lp, &res.Images[i], cfg.Created); err != nil {
			return nil, fmt.Errorf("write the SBOM referrer: %w", err)
		}
	}
	res.DockerTar = filepath.Join(cfg.Out, fmt.Sprintf("tidemark-%s-%s-%s.tar", cfg.Tag, cfg.Platforms[0].OS, cfg.Platforms[0].Architecture))
	if err := tarball.WriteToFile(res.DockerTar, ref, first); err != nil {
		return nil, fmt.Errorf("write the docker tarball: %w", err)
	}
	err = filepath.Walk(filepath.Join(res.Layout, "blobs"), func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			res.LayoutSize += fi.Size()
		}
		return err
	})
	return res, err
}

func buildOne(cfg Config, p v1.Platform, labels map[string]string) (v1.Image, *Built, error) {
	b := &Built{Platform: p}
	bin, err := goBuild(cfg, p)
	if err != nil {
		return nil, nil, err
	}
	b.BinarySize = int64(len(bin))
	bi, err := buildinfo.Read(bytes.NewReader(bin))
	if err != nil {
		return nil, nil, fmt.Errorf("read the binary's build information: %w", err)
	}
	sbomName := fmt.Sprintf("tidemark-%s-%s-%s", cfg.Tag, p.OS, p.Architecture)
	sbom := NewSBOM(bi, sha256Of(bin), sbomName, cfg.Tag, cfg.Source, cfg.Created)
	sbomJSON := sbom.JSON()
	b.SBOMCount, b.SBOM = len(sbom.Packages), sbomJSON
	b.SBOMPath = filepath.Join(cfg.Out, sbomName+".spdx.json")
	if err := os.WriteFile(b.SBOMPath, sbomJSON, 0o644); err != nil {
		return nil, nil, err
	}
	layerTar, err := rootfs(bin, sbomJSON, cfg.Created)
	if err != nil {
		return nil, nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, nil, err
	}
	exposed := map[string]struct{}{}
	for _, port := range ports {
		exposed[port] = struct{}{}
	}
	img, err := mutate.ConfigFile(empty.Image, &v1.ConfigFile{
		Architecture: p.Architecture, OS: p.OS, Variant: p.Variant,
		Created: v1.Time{Time: cfg.Created},
		Config: v1.Config{
			User: User, Entrypoint: []string{BinaryPath}, Cmd: []string{"--help"},
			WorkingDir: "/", ExposedPorts: exposed, Labels: labels,
			Env: []string{"PATH=/"},
		},
	})
	if err != nil {
		return nil, nil, err
	}
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{
		Created: v1.Time{Time: cfg.Created}, CreatedBy: "go run ./lab/image (make image)",
		Comment: "tidemark " + cfg.Tag + ", its SBOM, the nonroot user",
	}})
	if err != nil {
		return nil, nil, err
	}
	img = mutate.MediaType(img, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	if b.Digest, err = img.Digest(); err != nil {
		return nil, nil, err
	}
	m, err := img.Manifest()
	if err != nil {
		return nil, nil, err
	}
	raw, _ := img.RawManifest()
	b.Manifest = v1.Descriptor{MediaType: types.OCIManifestSchema1, Size: int64(len(raw)), Digest: b.Digest}
	b.Size = int64(len(raw)) + m.Config.Size
	for _, l := range m.Layers {
		b.Size += l.Size
	}
	return img, b, nil
}

// SBOMType is the SPDX JSON media type, the SBOM artifact's artifactType.
const SBOMType = "application/spdx+json"

// appendSBOM writes the image's SBOM as an OCI 1.1 artifact whose subject is
// the image manifest (a referrer: `oras discover`, `cosign tree` and
// registries' referrers API find it once pushed) and lists it in index.json.
func appendSBOM(lp layout.Path, b *Built, created time.Time) (v1.Hash, error) {
	emptyJSON := []byte("{}")
	blob := func(data []byte) (v1.Hash, error) {
		h, _, err := v1.SHA256(bytes.NewReader(data))
		if err != nil {
			return h, err
		}
		return h, lp.WriteBlob(h, io.NopCloser(bytes.NewReader(data)))
	}
	cfgHash, err := blob(emptyJSON)
	if err != nil {
		return v1.Hash{}, err
	}
	sbomHash, err := blob(b.SBOM)
	if err != nil {
		return v1.Hash{}, err
	}
	subject := b.Manifest
	m := v1.Manifest{
		SchemaVersion: 2, MediaType: types.OCIManifestSchema1, ArtifactType: SBOMType,
		Config: v1.Descriptor{MediaType: types.OCIEmptyJSON, Size: int64(len(emptyJSON)), Digest: cfgHash, Data: emptyJSON},
		Layers: []v1.Descriptor{{MediaType: SBOMType, Size: int64(len(b.SBOM)), Digest: sbomHash,
			Annotations: map[string]string{"org.opencontainers.image.title": filepath.Base(b.SBOMPath)}}},
		Subject:     &subject,
		Annotations: map[string]string{"org.opencontainers.image.created": created.UTC().Format(time.RFC3339)},
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return v1.Hash{}, err
	}
	h, err := blob(raw)
	if err != nil {
		return v1.Hash{}, err
	}
	return h, lp.AppendDescriptor(v1.Descriptor{MediaType: types.OCIManifestSchema1, Size: int64(len(raw)), Digest: h, ArtifactType: SBOMType})
}

// goBuild compiles cmd/tidemark as `make build` does (version and commit by
// -ldflags -X), static (CGO_ENABLED=0), -trimpath, for the platform.
func goBuild(cfg Config, p v1.Platform) ([]byte, error) {
	dir, err := os.MkdirTemp("", "tidemark-image-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "tidemark")
	ldflags := "-s -w -X github.com/tidemark/tidemark/internal/telemetry.version=v" + cfg.Tag +
		" -X github.com/tidemark/tidemark/internal/telemetry.revision=" + cfg.Revision
	cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-ldflags", ldflags, "-o", out, "./cmd/tidemark")
	cmd.Dir = cfg.Root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture, "GOFLAGS=-mod=readonly")
	if o, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build ./cmd/tidemark: %w\n%s", err, o)
	}
	return os.ReadFile(out)
}

// rootfs is the image's one layer: the binary, the SBOM, /etc/passwd and
// /etc/group naming the nonroot user (65532, as distroless), its home and
// /tmp; owned by root, dated at the commit.
func rootfs(bin, sbom []byte, mtime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dir := func(name string, mode int64, uid int) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, Uid: uid, Gid: uid, ModTime: mtime, Format: tar.FormatPAX})
	}
	file := func(name string, mode int64, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: mtime, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	steps := []func() error{
		func() error { return dir("etc", 0o755, 0) },
		func() error {
			return file("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"))
		},
		func() error { return file("etc/group", 0o644, []byte("root:x:0:\nnonroot:x:65532:\n")) },
		func() error { return dir("home", 0o755, 0) },
		func() error { return dir("home/nonroot", 0o700, 65532) },
		func() error { return dir("tmp", 0o1777, 0) },
		func() error { return file(BinaryPath[1:], 0o755, bin) },
		func() error { return dir("usr", 0o755, 0) },
		func() error { return dir("usr/share", 0o755, 0) },
		func() error { return dir("usr/share/doc", 0o755, 0) },
		func() error { return dir("usr/share/doc/tidemark", 0o755, 0) },
		func() error { return file(SBOMPath[1:], 0o644, sbom) },
		tw.Close,
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return nil, fmt.Errorf("the image's layer: %w", err)
		}
	}
	return buf.Bytes(), nil
}
