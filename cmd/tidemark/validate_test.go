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
		wantUsageLines(t, c.args, c.want)
	}
}

// TIDEMARK_LINGER was read by capture and apply for two different
// settings; set, it is refused with the variable that replaced it
// (--max-procs=-1 keeps the command from running if it is not).
func TestReplacedVariableIsRefused(t *testing.T) {
	t.Setenv("TIDEMARK_LINGER", "0")
	for cmd, env := range map[string]string{"capture": "TIDEMARK_CAPTURE_LINGER", "apply": "TIDEMARK_APPLY_LINGER"} {
		wantUsageLines(t, []string{cmd, "--pg", "postgres://x", "--kafka", "k:9092", "--redis", "redis://r:6379/0", "--max-procs=-1"}, []string{
			"--linger: TIDEMARK_LINGER is no longer read (each command that read it took it for a different setting): set " + env + " instead"})
	}
}

// The replacements are what capture and apply read.
func TestCommandsReadTheirOwnLinger(t *testing.T) {
	t.Setenv("TIDEMARK_CAPTURE_LINGER", "250us")
	t.Setenv("TIDEMARK_APPLY_LINGER", "3ms")
	for cmd, want := range map[string]string{"capture": "linger: 250µs # env TIDEMARK_CAPTURE_LINGER", "apply": "linger: 3ms # env TIDEMARK_APPLY_LINGER"} {
		code, stdout, stderr := runCLI(t, cmd, "--pg", "postgres://x", "--kafka", "k:9092", "--redis", "redis://r:6379/0", "--print-config")
		if code != 0 || !strings.Contains(stdout, want) {
			t.Errorf("tidemark %s --print-config: exit %d, want a line %q in\n%s%s", cmd, code, want, stdout, stderr)
		}
	}
}

// wantUsageLines runs tidemark with args and wants exit 2 and each of
// want as a line of its stderr.
func wantUsageLines(t *testing.T, args, want []string) {
	t.Helper()
	code, _, stderr := runCLI(t, args...)
	if code != cli.ExitUsage {
		t.Errorf("tidemark %s: exit %d, want %d; stderr: %s", strings.Join(args, " "), code, cli.ExitUsage, stderr)
	}
	lines := strings.Split(stderr, "\n")
	for _, w := range want {
		found := false
		for _, l := range lines {
			found = found || strings.HasSuffix(l, " "+w) || l == w // the first line carries "tidemark: <command>: "
		}
		if !found {
			t.Errorf("tidemark %s: no line %q in\n%s", strings.Join(args, " "), w, stderr)
		}
	}
}
