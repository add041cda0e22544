package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidemark/tidemark/cmd/internal/cli"
)

// A flag's TIDEMARK_X_FILE variable gives its value from a file (a Secret
// mounted as a volume), over the config file; a variable that is itself a
// flag's (TIDEMARK_REDIS_PASSWORD_FILE) keeps its own meaning; setting both
// TIDEMARK_X and TIDEMARK_X_FILE is refused.
func TestFileEnvReadsFlagValuesFromFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	pg := write("pg", "postgres://tm:pgsecret@db:5432/catalog\n")
	redis := write("redis", "redis://:rsecret@cache:6379/0\n")
	pw := write("redis-password", "hunter2\n")
	cfg := writeConfig(t, "pg: postgres://other@elsewhere/catalog\nredis: redis://elsewhere:6379/0\n")
	t.Setenv("TIDEMARK_PG_FILE", pg)
	t.Setenv("TIDEMARK_REDIS_FILE", redis)
	t.Setenv("TIDEMARK_REDIS_PASSWORD_FILE", pw)
	code, out, stderr := runCLI(t, "serve", "--config", cfg, "--print-config")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"pg: postgres://tm:xxxxx@db:5432/catalog # env TIDEMARK_PG_FILE", // the file over the config file, newline trimmed
		"redis: redis://:xxxxx@cache:6379/0 # env TIDEMARK_REDIS_FILE",
		"redis-password-file: " + pw + " # env TIDEMARK_REDIS_PASSWORD_FILE", // a flag's own variable
		`redis-password: "" # default`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("--print-config lacks %q:\n%s", want, out)
		}
	}
	for _, secret := range []string{"pgsecret", "rsecret", "hunter2"} {
		if strings.Contains(out, secret) {
			t.Errorf("--print-config shows the secret %q", secret)
		}
	}
	// A flag on the command line still wins.
	if code, out, stderr := runCLI(t, "serve", "--print-config", "--pg", "postgres://flag@db/catalog"); code != 0 || !strings.Contains(out, "pg: postgres://flag@db/catalog # flag --pg") {
		t.Errorf("exit %d, want --pg from the flag:\n%s%s", code, out, stderr)
	}
	t.Setenv("TIDEMARK_PG", "postgres://env@db/catalog")
	if code, _, stderr := runCLI(t, "serve", "--print-config"); code != cli.ExitUsage || !strings.Contains(stderr, "both TIDEMARK_PG and TIDEMARK_PG_FILE are set") {
		t.Errorf("exit %d, want %d refusing TIDEMARK_PG with TIDEMARK_PG_FILE: %s", code, cli.ExitUsage, stderr)
	}
	os.Unsetenv("TIDEMARK_PG")
	t.Setenv("TIDEMARK_PG_FILE", filepath.Join(dir, "missing"))
	if code, _, stderr := runCLI(t, "serve", "--print-config"); code != cli.ExitUsage || !strings.Contains(stderr, "TIDEMARK_PG_FILE") {
		t.Errorf("exit %d, want %d naming TIDEMARK_PG_FILE for a missing file: %s", code, cli.ExitUsage, stderr)
	}
}
