package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

// changelogVersion matches a released section's heading in CHANGELOG.md
// (Keep a Changelog): "## [0.1.0] - 2026-12-01". "## [Unreleased]" above it
// holds the changes since.
var changelogVersion = regexp.MustCompile(`^## \[(\d+\.\d+\.\d+)\]`)

// ChangelogVersion is the newest released version CHANGELOG.md names: the
// version a tag vX.Y.Z releases, the chart's appVersion and the image tag.
func ChangelogVersion(changelog []byte) (string, error) {
	sc := bufio.NewScanner(bytes.NewReader(changelog))
	for sc.Scan() {
		if m := changelogVersion.FindStringSubmatch(sc.Text()); m != nil {
			return m[1], nil
		}
	}
	return "", fmt.Errorf(`CHANGELOG.md has no released section ("## [X.Y.Z] - date")`)
}

// Chart is what the Helm chart says about the version and the image.
type Chart struct {
	Version    string // Chart.yaml version
	AppVersion string // Chart.yaml appVersion
	Repository string // values.yaml image.repository
	Tag        string // values.yaml image.tag ("" means appVersion)
}

// ReadChart reads deploy/helm/tidemark's Chart.yaml and values.yaml.
func ReadChart(root string) (Chart, error) {
	var c Chart
	var meta struct {
		Version    string `yaml:"version"`
		AppVersion string `yaml:"appVersion"`
	}
	var values struct {
		Image struct {
			Repository string `yaml:"repository"`
			Tag        string `yaml:"tag"`
		} `yaml:"image"`
	}
	dir := filepath.Join(root, "deploy", "helm", "tidemark")
	for name, v := range map[string]any{"Chart.yaml": &meta, "values.yaml": &values} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return c, fmt.Errorf("read the chart: %w", err)
		}
		if err := yaml.Unmarshal(b, v); err != nil {
			return c, fmt.Errorf("read the chart's %s: %w", name, err)
		}
	}
	c.Version, c.AppVersion = meta.Version, meta.AppVersion
	c.Repository, c.Tag = values.Image.Repository, values.Image.Tag
	if c.Repository == "" {
		return c, fmt.Errorf("the chart's values.yaml names no image.repository")
	}
	return c, nil
}

// ImageTag is the tag of an image built from the commit rev: the version
// itself when the commit carries the release tag vX.Y.Z (and the tree is
// clean), else version-dev.<commit> (plus .dirty), so only the release's
// commit produces the tag the chart deploys.
func ImageTag(root, version, rev string) string {
	out, _ := exec.Command("git", "-C", root, "tag", "--points-at", rev).Output()
	status, _ := exec.Command("git", "-C", root, "status", "--porcelain", "--untracked-files=no").Output()
	dirty := len(bytes.TrimSpace(status)) > 0
	tagged := false
	for _, t := range strings.Fields(string(out)) {
		tagged = tagged || t == "v"+version
	}
	if tagged && !dirty {
		return version
	}
	short := rev
	if len(short) > 12 {
		short = short[:12]
	}
	tag := version + "-dev." + short
	if dirty {
		tag += ".dirty"
	}
	return tag
}
