// Command image (`make image`, `go run ./lab/image`) builds tidemark's OCI
// image without a container engine or a registry: the static product binary
// cmd/tidemark for each platform, one layer each with no base image, a
// multi-platform index tagged with the CHANGELOG's version, and an SPDX SBOM
// per platform read from the binary's own build information (inside the
// image at SBOMPath and beside the layout). It writes bin/image/oci (an OCI
// layout: skopeo copy oci:bin/image/oci docker://..., crane push, or
// podman load) and a `docker load` tarball of the first platform. It is a
// build tool, so it lives on the lab side: the product never links it.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	out := fs.String("out", "bin/image", "output directory (replaced)")
	platforms := fs.String("platforms", "linux/amd64,linux/arm64", "comma-separated os/arch list; the first is also written as a docker tarball")
	if err := fs.Parse(args); err != nil {
		return err
	}
	root, err := repoRoot()
	if err != nil {
		return err
	}
	cfg, err := configFor(root, *out, *platforms)
	if err != nil {
		return err
	}
	res, err := Build(cfg)
	if err != nil {
		return err
	}
	fmt.Printf("image    %s\n", res.Ref)
	fmt.Printf("index    %s (%d platforms; revision %s)\n", res.Index, len(res.Images), cfg.Revision)
	for _, b := range res.Images {
		fmt.Printf("  %-12s %s  %s compressed, binary %s\n", b.Platform.OS+"/"+b.Platform.Architecture, b.Digest, mb(b.Size), mb(b.BinarySize))
		fmt.Printf("    SBOM %s: %d packages; in the image at %s; referrer %s in the layout\n", b.SBOMPath, b.SBOMCount, SBOMPath, b.Referrer)
	}
	fmt.Printf("layout   %s (%s of blobs)\n", res.Layout, mb(res.LayoutSize))
	fmt.Printf("docker   %s (docker load -i)\n", res.DockerTar)
	return nil
}

func mb(n int64) string { return fmt.Sprintf("%.1f MB (%d B)", float64(n)/1e6, n) }

func repoRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	gomod := strings.TrimSpace(string(out))
	if err != nil || gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("run inside the tidemark module (go env GOMOD: %q, %v)", gomod, err)
	}
	return filepath.Dir(gomod), nil
}

// configFor reads the version (CHANGELOG.md), the repository (the chart),
// the commit and its time (git) and the source URL (go.mod's module path).
func configFor(root, out, platforms string) (Config, error) {
	cfg := Config{Root: root, Out: out}
	changelog, err := os.ReadFile(filepath.Join(root, "CHANGELOG.md"))
	if err != nil {
		return cfg, err
	}
	if cfg.Version, err = ChangelogVersion(changelog); err != nil {
		return cfg, err
	}
	chart, err := ReadChart(root)
	if err != nil {
		return cfg, err
	}
	cfg.Repository = chart.Repository
	git := func(args ...string) (string, error) {
		o, err := exec.Command("git", append([]string{"-C", root}, args...)...).Output()
		if err != nil {
			return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
		}
		return strings.TrimSpace(string(o)), nil
	}
	if cfg.Revision, err = git("rev-parse", "HEAD"); err != nil {
		return cfg, err
	}
	ct, err := git("log", "-1", "--format=%ct", cfg.Revision)
	if err != nil {
		return cfg, err
	}
	secs, err := strconv.ParseInt(ct, 10, 64)
	if err != nil {
		return cfg, fmt.Errorf("commit time %q: %w", ct, err)
	}
	cfg.Created = time.Unix(secs, 0).UTC()
	cfg.Tag = ImageTag(root, cfg.Version, cfg.Revision)
	list := exec.Command("go", "list", "-m")
	list.Dir = root
	mod, err := list.Output()
	if err != nil {
		return cfg, fmt.Errorf("go list -m: %w", err)
	}
	cfg.Source = "https://" + strings.TrimSpace(string(mod))
	for _, p := range strings.Split(platforms, ",") {
		os, arch, ok := strings.Cut(strings.TrimSpace(p), "/")
		if !ok || os != "linux" {
			return cfg, fmt.Errorf("platform %q: want linux/<arch>", p)
		}
		cfg.Platforms = append(cfg.Platforms, v1.Platform{OS: os, Architecture: arch})
	}
	return cfg, nil
}
