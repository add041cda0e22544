package main

import (
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// rooms are the layers of the import graph, top down (docs/design.md,
// Layout): a package may import its own room and the rooms below it, never
// one above.
var rooms = []struct{ name, holds string }{
	{"cmd", "cmd/ and examples/: the binaries and the example programs"},
	{"lab", "lab/ and deploy/: servers for tests, chaos, benchmarks, the image, the chart's test"},
	{"stages", "the product's stages (top-level packages) and internal/wiring, which assembles them"},
	{"shared", "internal/ and catalog, rollout: what the stages share"},
	{"leaves", "packages that import no package of the module"},
}

// leaves and shared name the packages of the two lowest rooms outside
// internal/ (every other top-level package is a stage); a leaf that starts
// importing the module's packages then runs an arrow back up, instead of
// moving rooms unseen.
var (
	leaves = []string{"promise", "schema", "migrations", "elect", "internal/config", "internal/lifecycle",
		"internal/pgprimary", "internal/secretfile", "internal/svgchart", "internal/svgchart/svgcharttest"}
	shared = []string{"catalog", "rollout"}
)

func roomOf(pkg string) int {
	first, _, _ := strings.Cut(pkg, "/")
	switch {
	case first == "cmd" || first == "examples":
		return 0
	case first == "lab" || first == "deploy":
		return 1
	case slices.Contains(leaves, pkg):
		return 4
	case pkg == "internal/wiring":
		return 2
	case first == "internal" || slices.Contains(shared, pkg):
		return 3
	}
	return 2
}

// TestImportRooms is the import summary of the module: its rooms, how many
// packages (floors) each holds, and the arrows between them (non-test
// imports, by `go list`). No arrow may run back up, from a room to one
// above it. `go test -v -run TestImportRooms ./cmd/tidemark` prints the
// table docs/design.md quotes.
func TestImportRooms(t *testing.T) {
	const module = "github.com/tidemark/tidemark/"
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, module+"...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	floors := make([]int, len(rooms))
	down := make([]int, len(rooms))   // arrows from the room to a room below
	within := make([]int, len(rooms)) // arrows inside the room
	up := make([]int, len(rooms))     // arrows from the room to a room above
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkg := strings.TrimPrefix(f[0], module)
		from := roomOf(pkg)
		floors[from]++
		for _, imp := range f[1:] {
			if !strings.HasPrefix(imp, module) {
				continue
			}
			to := roomOf(strings.TrimPrefix(imp, module))
			switch {
			case to > from:
				down[from]++
			case to == from:
				within[from]++
			default:
				up[from]++
				t.Errorf("%s (room %s) imports %s (room %s, above it)", pkg, rooms[from].name, imp, rooms[to].name)
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| room | floors (packages) | arrows down | arrows within | arrows back up | holds |\n|---|---|---|---|---|---|\n")
	total := 0
	for i, r := range rooms {
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %s |\n", r.name, floors[i], down[i], within[i], up[i], r.holds)
		total += floors[i]
	}
	t.Logf("import rooms, top down:\n%s", b.String())
	if floors[2] < 10 || floors[4] < 5 || total < 40 {
		t.Fatalf("rooms hold %v of %d packages; is go list's output right?\n%s", floors, total, out)
	}
}
