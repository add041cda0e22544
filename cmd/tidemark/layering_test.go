package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The hot-set tracker is a stage of its own: the adapters that feed it the
// API's lookups and feed the replica builder from it live where the serve
// role is wired (internal/wiring), so hotset imports neither.
func TestHotsetImportsNoOtherStage(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{join .Imports " "}}`, "github.com/tidemark/tidemark/hotset").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	imports := strings.Fields(string(out))
	if !slices.Contains(imports, "github.com/tidemark/tidemark/schema") {
		t.Fatalf("go list says hotset imports %v; want at least tidemark/schema (is the listing right?)", imports)
	}
	for _, stage := range []string{"github.com/tidemark/tidemark/api", "github.com/tidemark/tidemark/replica", "github.com/tidemark/tidemark/warm", "github.com/tidemark/tidemark/audit"} {
		if slices.Contains(imports, stage) {
			t.Errorf("hotset imports %s; adapters between stages belong in internal/wiring", stage)
		}
	}
}
