package main

import (
	"encoding/json"
	"fmt"
	"html"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/migrations"
)

// serve on an unmigrated database is not ready, and its status page (/ and
// /status.json) says why and what to run, as /readyz does; once migrated,
// the page says ready.
func TestStatusPageShowsWhyTheProcessIsNotReady(t *testing.T) {
	ctx := testenv.Context(t, 180*time.Second)
	pg := testenv.SharedPostgres(t)
	dsn := pg.DSN(pg.NewDatabase(t))
	r := testenv.StartRedis(t)

	srv := startServe(t, ctx, "--pg", dsn, "--redis", r.URL(), "--audit-rate", "0", "--warm-top", "0", "--status-every", "1s")
	get := srv.get
	shown := regexp.MustCompile(`(?s)<p id="process-ready"[^>]*>(.*?)</p>`)
	page := func() (string, string, error) {
		_, body, err := get("/")
		if err != nil {
			return "", "", err
		}
		m := shown.FindStringSubmatch(body)
		if m == nil {
			return "", "", fmt.Errorf("the status page has no process-ready line")
		}
		_, js, err := get("/status.json")
		if err != nil {
			return "", "", err
		}
		var rep struct {
			ProcessReady string `json:"process_ready"`
		}
		if err := json.Unmarshal([]byte(js), &rep); err != nil {
			return "", "", fmt.Errorf("status.json: %v: %s", err, js)
		}
		return html.UnescapeString(m[1]), rep.ProcessReady, nil
	}
	var line, jsonReady string
	testenv.Eventually(t, 60*time.Second, "serve's status page says it is not ready and why", func() error {
		code, body, err := get("/readyz")
		if err != nil {
			return err
		}
		if code != 503 {
			return fmt.Errorf("/readyz %d %s on an unmigrated database", code, body)
		}
		if line, jsonReady, err = page(); err != nil {
			return err
		}
		for _, s := range []string{line, jsonReady} {
			if !strings.Contains(s, "not ready") || !strings.Contains(s, "run tidemark migrate") {
				return fmt.Errorf("status page shows %q, want not ready with the reason (run tidemark migrate)", s)
			}
		}
		return nil
	})
	t.Logf("unmigrated: / shows %q; status.json process_ready %q", line, jsonReady)

	if _, err := migrations.Up(ctx, dsn, testenv.Logger(t)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "serve's status page says ready once migrated", func() error {
		var err error
		if line, jsonReady, err = page(); err != nil {
			return err
		}
		if line != "this serve process: ready" || jsonReady != "ready" {
			return fmt.Errorf("status page shows %q, status.json %q, want ready", line, jsonReady)
		}
		return nil
	})
	t.Logf("migrated: / shows %q", line)
}
