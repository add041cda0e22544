package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// BinaryAtCommit builds cmd/tidemark as it was at commit, taken from this
// repository's history (git archive into a temporary directory, so the
// checkout is untouched), once per test binary, and returns its path: the
// old build of a rolling-upgrade test until a release exists.
func BinaryAtCommit(t testing.TB, commit string) string {
	t.Helper()
	needServer(t, "BinaryAtCommit")
	return cachedBuild(t, "commit:"+commit, func() (string, error) { return buildCommit(commit) })
}

func buildCommit(commit string) (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	dir, err := os.MkdirTemp("", "tidemark-old-")
	if err != nil {
		return "", err
	}
	shared.add(func() { os.RemoveAll(dir) })
	src := filepath.Join(dir, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		return "", err
	}
	// A shallow clone lacks the commit: say so rather than build something else.
	tarball := filepath.Join(dir, "src.tar")
	if out, err := exec.Command("git", "-C", root, "archive", "--format=tar", "-o", tarball, commit).CombinedOutput(); err != nil {
		return "", fmt.Errorf("git archive %s (is the clone shallow? the commit must be in this repository's history): %v\n%s", commit, err, out)
	}
	if out, err := exec.Command("tar", "-x", "-C", src, "-f", tarball).CombinedOutput(); err != nil {
		return "", fmt.Errorf("unpack %s: %v\n%s", tarball, err, out)
	}
	path := filepath.Join(dir, "tidemark")
	// An archive has no VCS information: the commit is linked in, so the
	// old build's `tidemark version` names it (a no-op for a commit whose
	// build info has no such variable).
	// -trimpath: the temporary directory is then no part of the build, so
	// a later run's build of the same commit comes from the build cache.
	cmd := exec.Command("go", "build", "-trimpath", "-o", path, "-ldflags", "-X github.com/tidemark/tidemark/internal/telemetry.revision="+commit, "./cmd/tidemark")
	cmd.Dir = src
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/tidemark at %s: %v\n%s", commit, err, out)
	}
	return path, nil
}
