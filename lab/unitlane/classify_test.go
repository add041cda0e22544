package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// The reading keeps out a test that reaches a server through a helper or a
// method of its package, another lab package, or a program other than
// `go list`, and keeps in the rest.
func TestClassifyKeepsServerTestsOut(t *testing.T) {
	dir := t.TempDir()
	src := `package p

import (
	"os/exec"
	"testing"

	"github.com/tidemark/tidemark/lab/seed"
	"github.com/tidemark/tidemark/lab/testenv"
)

type rig struct{}

func (rig) start(t *testing.T) { testenv.StartRedis(t) }
func helper(t *testing.T)      { var r rig; r.start(t) }

func TestPure(t *testing.T)      { _ = testenv.Context(t, 0) }
func TestGoList(t *testing.T)    { exec.Command("go", "list", "./...") }
func TestViaHelper(t *testing.T) { helper(t) }
func TestViaValue(t *testing.T)  { t.Run("x", helper) }
func TestOtherLab(t *testing.T)  { seed.Rows() }
func TestProgram(t *testing.T)   { exec.Command("helm", "lint") }
func FuzzPure(f *testing.F)      {}
func Testing(t *testing.T)       { helper(t) }
`
	if err := os.WriteFile(filepath.Join(dir, "p_test.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	lane, all, err := classify(dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"FuzzPure", "TestGoList", "TestPure"}; !slices.Equal(lane, want) {
		t.Fatalf("lane %v, want %v", lane, want)
	}
	if len(all) != 7 || all["Testing"] {
		t.Fatalf("all tests %v: want the 7 tests and fuzz targets, not Testing", all)
	}
}

// A package whose TestMain starts a server has no test in the lane.
func TestClassifyTestMainStartingServers(t *testing.T) {
	dir := t.TempDir()
	src := `package p

import (
	"testing"

	"github.com/tidemark/tidemark/lab/testenv"
)

func TestMain(m *testing.M) { testenv.SharedPostgres(nil); m.Run() }
func TestPure(t *testing.T) {}
`
	if err := os.WriteFile(filepath.Join(dir, "p_test.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if lane, _, err := classify(dir); err != nil || len(lane) != 0 {
		t.Fatalf("lane %v (err %v), want none", lane, err)
	}
}

// The module's lane holds what issue 39 names for it: schema, config
// validation, flag binding, the hot-set sketch, the chaos checker on
// recorded histories, svgchart.
func TestModuleLaneHoldsTheServerFreeTests(t *testing.T) {
	pkgs, err := modulePackages()
	if err != nil {
		t.Fatal(err)
	}
	in := map[string]bool{}
	for _, p := range pkgs {
		lane, _, err := classify(p.dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range lane {
			in[p.importPath[len(module):]+" "+n] = true
		}
	}
	for _, want := range []string{
		"/schema TestGoldenEvents",
		"/cache TestConfigValidateReportsEveryProblem",
		"/cmd/tidemark TestEveryValidatedFieldHasAFlag",
		"/hotset TestSketchFindsHeavyHittersUnderScan",
		"/lab/chaos TestCheckerPlantedViolations",
		"/internal/svgchart TestLineChartLogY",
		"/cmd/tidemark TestProductDoesNotImportLab",
	} {
		if !in[want] {
			t.Errorf("%s is not in the lane", want)
		}
	}
	for _, notWant := range []string{"/reader TestMinVersionBounds", "/api TestReadPathAndAuth"} {
		if in[notWant] {
			t.Errorf("%s (starts servers) is in the lane", notWant)
		}
	}
}
