package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Another repository can import package reader: this service and the
// README's reader snippet build in a module of their own that requires
// github.com/tidemark/tidemark (replaced by this checkout), from the module
// cache alone (GOPROXY=off: what this repository's own build fetched), so
// neither may lean on anything only code inside the module can import
// (an internal package, a relative path).
func TestBuildsFromAnotherModule(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goLine := regexp.MustCompile(`(?m)^go \S+$`).Find(gomod)
	if goLine == nil {
		t.Fatal("go.mod has no go line")
	}
	dir := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/shopservice\n\n"+string(goLine)+"\n\nrequire github.com/tidemark/tidemark v0.0.0\n\nreplace github.com/tidemark/tidemark => "+root+"\n")
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	write("go.sum", string(sum))
	service, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	write("readthrough/main.go", string(service))

	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```go\n(ccfg := cache.DefaultConfig\\(\\).*?)```").FindSubmatch(readme)
	if m == nil {
		t.Fatal("README.md has no ```go block starting with ccfg := cache.DefaultConfig() (the reader snippet)")
	}
	// The snippet is a main's body: the pool, the Redis client, ctx and must
	// come from the code around it, as in examples/readthrough.
	write("snippet/main.go", `package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/catalog"
	"github.com/tidemark/tidemark/reader"
)

func main() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("PG"))
	must(err)
	rdb, err := cache.ParseRedisURL(os.Getenv("REDIS"))
	must(err)
`+string(m[1])+`}

func must(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
`)
	cmd := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(dir, "bin")+"/", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off", "GOTOOLCHAIN=local")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go build in a module of its own (GOPROXY=off): %v\n%s", err, out)
	}
	for _, bin := range []string{"readthrough", "snippet"} {
		if _, err := os.Stat(filepath.Join(dir, "bin", bin)); err != nil {
			t.Errorf("%s was not built: %v", bin, err)
		}
	}
	if strings.TrimSpace(string(out)) != "" {
		t.Logf("go build: %s", out)
	}
}
