package main

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
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

func TestUsageErrorsExit2NamingEveryProblem(t *testing.T) {
	code, _, stderr := runCLI(t, "status", "--redis", "redis://127.0.0.1:1/0", "--kafka", "127.0.0.1:1", "--warn=-1s", "--timeout", "0s")
	if code != cli.ExitUsage {
		t.Fatalf("exit %d, want %d; stderr: %s", code, cli.ExitUsage, stderr)
	}
	for _, want := range []string{"--warn", "--timeout"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr does not name %s: %s", want, stderr)
		}
	}
	if code, _, stderr := runCLI(t, "migrate"); code != cli.ExitUsage || !strings.Contains(stderr, "--pg") {
		t.Fatalf("migrate without --pg: exit %d, stderr %q", code, stderr)
	}
	if code, _, stderr := runCLI(t, "--log-format", "xml", "version"); code != cli.ExitUsage || !strings.Contains(stderr, "--log-format") {
		t.Fatalf("bad --log-format: exit %d, stderr %q", code, stderr)
	}
	if code, _, _ := runCLI(t, "no-such-command"); code != cli.ExitUsage {
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

// -ldflags -X sets the version and commit for builds without VCS
// information (the Dockerfile, make build); internal/telemetry tests the
// build-information path.
func TestVersionNamesModuleAndCommit(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "tidemark")
	build := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-o", bin,
		"-ldflags", "-X github.com/tidemark/tidemark/internal/telemetry.version=v9.8.7 -X github.com/tidemark/tidemark/internal/telemetry.revision=abc123", ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "tidemark v9.8.7 (commit abc123,") {
		t.Fatalf("version with -ldflags: %v, %q; want tidemark v9.8.7 (commit abc123, ...", err, out)
	}
}
