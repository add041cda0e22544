package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/tidemark/tidemark/cmd/internal/cli"
	"github.com/tidemark/tidemark/lab/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// A lab command's problems are worded by flag, each on its own line; exit 2.
func TestUsageErrorsNameEveryFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"kafka", "--brokers", "0", "--partitions", "0"}, []string{"--brokers", "--partitions"}},
		{[]string{"bench", "capture", "--rows", "10", "--rate", "0", "--duration", "10ms", "--partitions", "0", "--rounds", "0", "--max-procs=-1"},
			[]string{"--rows: must be at least 1000 (got 10)", "--rate: must be positive (got 0)", "--duration: must be at least 1s (got 10ms)",
				"--partitions: must be at least 1 (got 0)", "--rounds: must be at least 1 (got 0)", "--max-procs: must not be negative (got -1)"}},
	} {
		code, _, stderr := runCLI(t, c.args...)
		if code != cli.ExitUsage {
			t.Errorf("tidemark-lab %s: exit %d, want %d; stderr: %s", strings.Join(c.args, " "), code, cli.ExitUsage, stderr)
		}
		for _, want := range c.want {
			if !strings.Contains(stderr, want) {
				t.Errorf("tidemark-lab %s: stderr does not name %s: %s", strings.Join(c.args, " "), want, stderr)
			}
		}
	}
}
