package api

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/lab/testenv"
)

// A miss the source budget refuses gives its fill lease back: the key's
// next reader, in this process or another, asks the budget at once instead
// of waiting out a lease no fill will come for (which left a ramp's budget
// mostly unspent while its readers timed out).
func TestRefusedMissGivesTheLeaseBack(t *testing.T) {
	e := newEnv(t)
	// One foreground read every 5 s: once one is admitted, the next is refused.
	in := e.instance(instOpts{cfg: func(c *Config) { c.ForegroundRate = 0.2 }})
	key := e.apiKey("acme")
	e.exec(`INSERT INTO catalog.items (tenant_id, item_id, version, display) VALUES
		('acme', 'a', 1, '{"n":1}'), ('acme', 'b', 1, '{"n":2}')`)
	// A fresh budget starts empty: the first read waits for its first slot.
	testenv.Eventually(t, 20*time.Second, "the first miss is admitted", func() error {
		if r := e.do("GET", in.item("a"), key, ""); r.code != 200 {
			return fmt.Errorf("answered %d %q", r.code, r.cacheStatus())
		}
		return nil
	})
	r := e.do("GET", in.item("b"), key, "")
	if r.code != 503 || !strings.Contains(r.cacheStatus(), "detail=budget") {
		t.Fatalf("second miss within the budget's interval: %d %q, want 503 detail=budget", r.code, r.cacheStatus())
	}
	lr, err := in.srv.cache.Lookup(context.Background(), "acme", "b", 0)
	if err != nil {
		t.Fatal(err)
	}
	if lr.Status != cache.StatusMiss || lr.Token.IsZero() {
		t.Fatalf("lookup right after the refused miss: %s (token %v), want a miss with a lease (wait: the refused read kept the key's lease)",
			lr.Status, !lr.Token.IsZero())
	}
}
