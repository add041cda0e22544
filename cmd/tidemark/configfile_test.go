package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidemark/tidemark/cmd/internal/cli"
)

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tidemark.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// A value comes from the flag, else its environment variable, else the
// config file, else the default, and --print-config says which, with
// secrets redacted.
func TestConfigFilePrecedence(t *testing.T) {
	pw := filepath.Join(t.TempDir(), "redis-password")
	if err := os.WriteFile(pw, []byte("hunter2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, `pg: postgres://u:pgsecret@db/catalog
redis: redis://127.0.0.1:6379/0
redis-password-file: `+pw+`
addr: 127.0.0.1:1111
metrics-addr: 127.0.0.1:2222
api:
  RequestTimeout: 3s
kafka-sasl-password: ksecret
kafka-sasl-mechanism: PLAIN
kafka-sasl-user: u
`)
	t.Setenv("TIDEMARK_METRICS_ADDR", "127.0.0.1:3333")
	t.Setenv("TIDEMARK_ADDR", "127.0.0.1:4444")
	code, out, stderr := runCLI(t, "serve", "--config", cfg, "--print-config", "--addr", "127.0.0.1:5555")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"addr: 127.0.0.1:5555 # flag --addr",                       // flag over env and file
		"metrics-addr: 127.0.0.1:3333 # env TIDEMARK_METRICS_ADDR", // env over file
		"request-timeout: 3s # file " + cfg + ":7",                 // a field key, nested
		"redis-password-file: " + pw + " # file " + cfg + ":3",
		"lookup-timeout: 250ms # default",
		"pg: postgres://u:xxxxx@db/catalog # file", // the DSN's password hidden
		"kafka-sasl-password: <redacted> # file",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("--print-config lacks %q:\n%s", want, out)
		}
	}
	for _, secret := range []string{"pgsecret", "ksecret", "hunter2"} {
		if strings.Contains(out, secret) {
			t.Errorf("--print-config shows the secret %q", secret)
		}
	}
}

// A wrong key or value is an error naming the file, the line and the key.
func TestConfigFileErrorsNameFileLineKey(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{"log-level: info\nsession-timeuot: 5s\n", ":2: unknown key \"session-timeuot\""},
		{"log-level: info\napplier:\n  SessionTimout: 5s\n", ":3: unknown key \"applier.SessionTimout\""},
		{"pg: x\nredis: redis://h:1/0\nrequest-timeout: soon\n", ":3: request-timeout:"},
		{"pg: x\nredis: redis://h:1/0\napi:\n  RequestTimeout: soon\n", ":4: api.RequestTimeout:"},
		{"pg: x\nredis: redis://h:1/0\nredis-mode: sometimes\n", ":3: redis-mode: must be one of"},
		{"- a\n- b\n", ":1: the config file must be a mapping"},
	} {
		cfg := writeConfig(t, tc.body)
		code, _, stderr := runCLI(t, "serve", "--config", cfg, "--print-config")
		if code != cli.ExitUsage || !strings.Contains(stderr, cfg+tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want exit %d naming %q", tc.body, code, stderr, cli.ExitUsage, cfg+tc.want)
		}
	}
}

// One file serves every command: its keys for other commands are ignored,
// and every command takes its values from it.
func TestConfigFileEveryCommand(t *testing.T) {
	cfg := writeConfig(t, `log-level: debug
pg: postgres://u@127.0.0.1:1/catalog
redis: redis://127.0.0.1:1/0
redis-mode: standalone
kafka: 127.0.0.1:1
since: 10m
session-timeout: 7s
request-timeout: 3s
`)
	cmds, err := cli.Commands(&root{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cmds {
		name := c.Path
		args := append(strings.Fields(c.Path), "--config", cfg, "--print-config")
		code, out, stderr := runCLI(t, args...)
		if strings.Contains(stderr, "unknown key") || strings.Contains(stderr, cfg+":") {
			t.Errorf("tidemark %s: the shared file is refused: %s", name, stderr)
			continue
		}
		if code != 0 {
			continue // the command needs arguments no file gives (apikey create's tenant)
		}
		if !strings.Contains(out, "log-level: debug # file "+cfg+":1") {
			t.Errorf("tidemark %s: log-level not taken from the file:\n%s", name, out)
		}
	}
}

// A secret given both as a value and as a file, from any two sources, is
// refused with both sources named: which one wins would be a guess.
func TestSecretGivenTwiceIsRefused(t *testing.T) {
	pw := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(pw, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, "redis-password: in-the-file\n")
	t.Setenv("TIDEMARK_KAFKA_SASL_PASSWORD", "from-env")
	t.Setenv("TIDEMARK_REDIS_PASSWORD_FILE", pw)
	code, _, stderr := runCLI(t, "serve", "--config", cfg, "--pg", "postgres://u@127.0.0.1:1/db", "--redis", "redis://127.0.0.1:1/0",
		"--kafka", "127.0.0.1:1", "--kafka-sasl-mechanism", "SCRAM-SHA-512", "--kafka-sasl-user", "u", "--kafka-sasl-password-file", pw)
	if code != cli.ExitUsage {
		t.Fatalf("serve with secrets given twice: exit %d, want %d\n%s", code, cli.ExitUsage, stderr)
	}
	for _, want := range []string{
		"--kafka-sasl-password is given twice: as a value (env TIDEMARK_KAFKA_SASL_PASSWORD) and as a file (--kafka-sasl-password-file, flag --kafka-sasl-password-file)",
		"--redis-password is given twice: as a value (file " + cfg + ":1) and as a file (--redis-password-file, env TIDEMARK_REDIS_PASSWORD_FILE)",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if strings.Contains(stderr, "from-env") || strings.Contains(stderr, "in-the-file") {
		t.Errorf("the refusal shows a secret:\n%s", stderr)
	}
}
