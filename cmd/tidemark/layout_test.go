package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestProductDoesNotImportLab holds the tree's one layout rule: the lab
// (lab/: chaos, benchmarks, local servers, test environment, and its binary
// cmd/tidemark-lab) may import the product, never the other way round. Test
// files are exempt: they may start servers through lab/testenv.
func TestProductDoesNotImportLab(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "github.com/tidemark/tidemark/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	var product int
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkg := f[0]
		if pkg == "github.com/tidemark/tidemark/cmd/tidemark-lab" || strings.HasPrefix(pkg, "github.com/tidemark/tidemark/lab/") {
			continue
		}
		product++
		for _, imp := range f[1:] {
			if imp == "github.com/tidemark/tidemark/lab" || strings.HasPrefix(imp, "github.com/tidemark/tidemark/lab/") {
				t.Errorf("product package %s imports lab package %s", pkg, imp)
			}
		}
	}
	if product < 10 {
		t.Fatalf("saw only %d product packages in go list's output:\n%s", product, out)
	}
}

// TestProductBinaryHoldsNoLab: the binary the image ships, cmd/tidemark,
// links no lab package and no in-process Kafka (kfake), by its whole
// dependency list, not only its direct imports.
func TestProductBinaryHoldsNoLab(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/tidemark/tidemark/cmd/tidemark").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, "github.com/tidemark/tidemark/api") {
		t.Fatalf("go list -deps ./cmd/tidemark lacks the api package; is the listing right?\n%s", out)
	}
	for _, d := range deps {
		if strings.HasPrefix(d, "github.com/tidemark/tidemark/lab") || strings.Contains(d, "franz-go/pkg/kfake") ||
			strings.HasPrefix(d, "github.com/tidemark/tidemark/cmd/tidemark-lab") {
			t.Errorf("the product binary cmd/tidemark depends on %s", d)
		}
	}
}

// TestNoTestSkips holds the README's promise that nothing is skipped: no
// test file calls Skip, SkipNow or Skipf, or asks testing.Short(), so
// `go test -short` runs exactly what `make test` runs and a missing server
// fails a test instead of hiding it.
func TestNoTestSkips(t *testing.T) {
	out, err := exec.Command("go", "list", "-tags", "realkafka", "-f", `{{.Dir}}{{range .TestGoFiles}} {{.}}{{end}}{{range .XTestGoFiles}} {{.}}{{end}}`, "github.com/tidemark/tidemark/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	skip := regexp.MustCompile(`\.(Skip|SkipNow|Skipf)\(|testing\.Short\(\)`)
	files := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		for _, name := range f[1:] {
			files++
			src, err := os.ReadFile(filepath.Join(f[0], name))
			if err != nil {
				t.Fatal(err)
			}
			for i, l := range strings.Split(string(src), "\n") {
				if code, _, _ := strings.Cut(l, "//"); skip.MatchString(code) {
					t.Errorf("%s:%d: want no skipped tests (README: nothing is skipped), got %q", filepath.Join(f[0], name), i+1, strings.TrimSpace(l))
				}
			}
		}
	}
	if files < 50 {
		t.Fatalf("saw only %d test files in go list's output:\n%s", files, out)
	}
}
