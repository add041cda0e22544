package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestProductDoesNotImportLab holds the tree's one layout rule: the lab
// (lab/: chaos, benchmarks, local servers, test environment) may import the
// product, never the other way round. Only the binary (cmd/tidemark) wires
// both. Test files are exempt: they may start servers through lab/testenv.
func TestProductDoesNotImportLab(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "tidemark/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	var product int
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkg := f[0]
		if pkg == "tidemark/cmd/tidemark" || strings.HasPrefix(pkg, "tidemark/lab/") {
			continue
		}
		product++
		for _, imp := range f[1:] {
			if imp == "tidemark/lab" || strings.HasPrefix(imp, "tidemark/lab/") {
				t.Errorf("product package %s imports lab package %s", pkg, imp)
			}
		}
	}
	if product < 10 {
		t.Fatalf("saw only %d product packages in go list's output:\n%s", product, out)
	}
}
