package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

type build struct {
	once sync.Once
	path string
	err  error
}

var builds struct {
	mu sync.Mutex
	m  map[string]*build
}

// Binary builds cmd/tidemark (and cmd/tidemark-lab beside it) once per test
// binary and returns the product binary's path, for tests that kill -9 a
// real process.
func Binary(t testing.TB) string {
	t.Helper()
	return BinaryWithTags(t)
}

// LabBinary is tidemark-lab, built beside Binary's tidemark: the embedded
// broker (kafka), dev, bench and chaos commands.
func LabBinary(t testing.TB) string {
	t.Helper()
	return filepath.Join(filepath.Dir(Binary(t)), "tidemark-lab")
}

// BinaryWithTags builds cmd/tidemark with build tags (test-only switches,
// e.g. a deliberately broken component), once per test binary and tag set;
// the lab's binary is LabBinary's, built without them (the switches are
// the product's: the lab binary a chaos run uses is its broker and proxy).
func BinaryWithTags(t testing.TB, tags ...string) string {
	t.Helper()
	needServer(t, "BinaryWithTags")
	return cachedBuild(t, strings.Join(tags, ","), func() (string, error) { return buildBinary(tags) })
}

// cachedBuild runs make once per test binary and key and returns its path.
func cachedBuild(t testing.TB, key string, make func() (string, error)) string {
	t.Helper()
	builds.mu.Lock()
	if builds.m == nil {
		builds.m = map[string]*build{}
	}
	b := builds.m[key]
	if b == nil {
		b = &build{}
		builds.m[key] = b
	}
	builds.mu.Unlock()
	b.once.Do(func() { b.path, b.err = make() })
	if b.err != nil {
		t.Fatalf("testenv: %v", b.err)
	}
	return b.path
}

// BinDirEnv names a directory holding tidemark and tidemark-lab built from
// this checkout (`make test` builds them once, before the tests, as
// test-bin does): the untagged build then comes from there instead of a
// link per test binary. The Makefile sets it only for the run it built
// them for, so they are never older than the code under test.
const BinDirEnv = "TIDEMARK_TEST_BIN_DIR"

func buildBinary(tags []string) (string, error) {
	if dir := os.Getenv(BinDirEnv); dir != "" && len(tags) == 0 {
		if !filepath.IsAbs(dir) { // each test binary runs in its own package's directory
			return "", fmt.Errorf("%s=%s: want an absolute path", BinDirEnv, dir)
		}
		for _, pkg := range []string{"tidemark", "tidemark-lab"} {
			if _, err := os.Stat(filepath.Join(dir, pkg)); err != nil {
				return "", fmt.Errorf("%s=%s: %w", BinDirEnv, dir, err)
			}
		}
		return filepath.Join(dir, "tidemark"), nil
	}
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	dir, err := os.MkdirTemp("", "tidemark-bin-")
	if err != nil {
		return "", err
	}
	shared.add(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "tidemark")
	// Built without -race: the in-process tests cover races, and a race
	// build of the whole binary would cost CI a minute per package.
	// -trimpath, as the image builds it: the checkout's path is then no
	// part of the build, so another clone's build comes from the cache.
	args := []string{"build", "-trimpath"}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	pkgs := []string{"tidemark", "tidemark-lab"}
	if len(tags) > 0 {
		pkgs = pkgs[:1]
	}
	for _, pkg := range pkgs {
		cmd := exec.Command("go", append(args, "-o", filepath.Join(dir, pkg), "./cmd/"+pkg)...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("go build %v ./cmd/%s: %v\n%s", tags, pkg, err, out)
		}
	}
	return path, nil
}
