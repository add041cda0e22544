package main

import (
	"strings"
	"testing"

	"github.com/tidemark/tidemark/cmd/internal/cli"
)

// Every command words its problems one way: each on its own line, naming
// the flag (and its variable) that fills the field, as config.FieldError
// and the binder words them (cli.Binder.Words); exit 2.
func TestValidationWordsProblemsByFlag(t *testing.T) {
	cases := []struct {
		args []string
		want []string
	}{
		{[]string{"migrate"}, []string{"--pg (TIDEMARK_PG): is required"}},
		{[]string{"apikey", "create"}, []string{"--pg (TIDEMARK_PG): is required", "--tenant (TIDEMARK_TENANT): is required"}},
		{[]string{"warm", "--top", "0", "--wait=-1s"}, []string{"--redis (TIDEMARK_REDIS): is required",
			"--top: must be at least 1 (got 0)", "--wait: must not be negative (got -1s)"}},
		{[]string{"apply", "--max-procs=-1"}, []string{"--redis (TIDEMARK_REDIS): is required (redis://host:port/db or a Cluster seed list)", "--max-procs (TIDEMARK_APPLY_MAX_PROCS): must not be negative (got -1)"}},
		{[]string{"inspect", "--hot", "--top", "0"}, []string{"--redis (TIDEMARK_REDIS): is required", "--top: must be at least 1 (got 0)"}},
	}
	for _, c := range cases {
		code, _, stderr := runCLI(t, c.args...)
		if code != cli.ExitUsage {
			t.Errorf("tidemark %s: exit %d, want %d; stderr: %s", strings.Join(c.args, " "), code, cli.ExitUsage, stderr)
		}
		lines := strings.Split(stderr, "\n")
		for _, want := range c.want {
			found := false
			for _, l := range lines {
				found = found || strings.HasSuffix(l, " "+want) || l == want // the first line carries "tidemark: <command>: "
			}
			if !found {
				t.Errorf("tidemark %s: no line %q in\n%s", strings.Join(c.args, " "), want, stderr)
			}
		}
	}
}
