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

var builtBinary struct {
	once sync.Once
	path string
	err  error
}

// Binary builds cmd/tidemark once per test binary and returns its path, for tests that kill -9 a real process.
func Binary(t testing.TB) string {
	t.Helper()
	builtBinary.once.Do(func() {
		out, err := exec.Command("go", "env", "GOMOD").Output()
		if err != nil {
			builtBinary.err = fmt.Errorf("go env GOMOD: %w", err)
			return
		}
		root := filepath.Dir(strings.TrimSpace(string(out)))
		dir, err := os.MkdirTemp("", "tidemark-bin-")
		if err != nil {
			builtBinary.err = err
			return
		}
		shared.add(func() { os.RemoveAll(dir) })
		builtBinary.path = filepath.Join(dir, "tidemark")
		// Built without -race: the in-process tests cover races, and a race
		// build of the whole binary would cost CI a minute per package.
		cmd := exec.Command("go", "build", "-o", builtBinary.path, "./cmd/tidemark")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			builtBinary.err = fmt.Errorf("go build ./cmd/tidemark: %v\n%s", err, out)
		}
	})
	if builtBinary.err != nil {
		t.Fatalf("testenv: %v", builtBinary.err)
	}
	return builtBinary.path
}
