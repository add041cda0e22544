package chaos

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestChaosRunsPatternSelectsOnlyChaosRuns: the Makefile's CHAOS_RUNS is
// both test-go's -skip and test-chaos's -run, over every package for the
// first. A test elsewhere whose name it matches would run nowhere, and the
// short run (every fault kind, under -race in test-go) must not match.
func TestChaosRunsPatternSelectsOnlyChaosRuns(t *testing.T) {
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^CHAOS_RUNS := (.+)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("Makefile: no CHAOS_RUNS := line")
	}
	runs := regexp.MustCompile(strings.TrimSpace(string(m[1])))
	testFunc := regexp.MustCompile(`(?m)^func (Test\w+)\(t \*testing\.T\)`)
	chaosRuns, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	matched := 0
	err = filepath.WalkDir("../..", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return err
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		dir, err := filepath.Abs(filepath.Dir(path))
		if err != nil {
			return err
		}
		for _, f := range testFunc.FindAllSubmatch(src, -1) {
			name := string(f[1])
			if !runs.MatchString(name) {
				continue
			}
			matched++
			if dir != chaosRuns {
				t.Errorf("CHAOS_RUNS matches %s in %s: test-go skips it and test-chaos runs lab/chaos only", name, path)
			}
			if name == "TestChaosShortRun" {
				t.Errorf("CHAOS_RUNS matches TestChaosShortRun, which test-go runs under -race")
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if matched == 0 {
		t.Error("CHAOS_RUNS matches no test")
	}
}
