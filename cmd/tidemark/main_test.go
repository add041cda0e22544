package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"tidemark/lab/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestUsageErrorsExit2NamingEveryProblem(t *testing.T) {
	code, _, stderr := runCLI(t, "kafka", "--brokers", "0", "--partitions", "0")
	if code != exitUsage {
		t.Fatalf("exit %d, want %d; stderr: %s", code, exitUsage, stderr)
	}
	for _, want := range []string{"--brokers", "--partitions"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr does not name %s: %s", want, stderr)
		}
	}
	if code, _, stderr := runCLI(t, "migrate"); code != exitUsage || !strings.Contains(stderr, "--pg") {
		t.Fatalf("migrate without --pg: exit %d, stderr %q", code, stderr)
	}
	if code, _, stderr := runCLI(t, "--log-format", "xml", "version"); code != exitUsage || !strings.Contains(stderr, "--log-format") {
		t.Fatalf("bad --log-format: exit %d, stderr %q", code, stderr)
	}
	if code, _, _ := runCLI(t, "no-such-command"); code != exitUsage {
		t.Fatalf("unknown command: exit %d", code)
	}
}

func TestEnvironmentSuppliesFlags(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	t.Setenv("TIDEMARK_PG", pg.DSN(pg.NewDatabase(t)))
	code, stdout, stderr := runCLI(t, "migrate")
	if code != 0 || !strings.Contains(stdout, "applied") {
		t.Fatalf("first migrate: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	code, stdout, stderr = runCLI(t, "migrate")
	if code != 0 || !strings.Contains(stdout, "nothing to do") {
		t.Fatalf("second migrate: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

func TestVersion(t *testing.T) {
	code, stdout, _ := runCLI(t, "version")
	if code != 0 || !strings.HasPrefix(stdout, "tidemark ") {
		t.Fatalf("version: exit %d, %q", code, stdout)
	}
}
