package audit_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark/tidemark/audit"
	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/lab/testenv"
)

// fillPayload caches (tenant, item) at version with payload.
func (e *env) fillPayload(tenant, item string, version int64, payload string) {
	e.t.Helper()
	ctx := context.Background()
	lr, err := e.cc.Lookup(ctx, tenant, item, 0)
	if err != nil || lr.Token.IsZero() {
		e.t.Fatalf("lookup %s/%s: %+v %v", tenant, item, lr, err)
	}
	if err := e.cc.Fill(ctx, tenant, item, lr.Token, version, []byte(payload), time.Now()); err != nil {
		e.t.Fatal(err)
	}
}

// The auditor compares content, not only versions, and evicts what the
// source cannot vouch for (issues 37 and 36): a display rewritten under
// session_replication_role = replica (version unchanged), an entry another
// table's reader in the same namespace cached under a key this table also
// has, one under a key this table has no row for (wrong_tenant) and one
// ahead of its row are each counted by kind and deleted, so the next reader
// reads the source; an entry whose display matches is left alone.
func TestAuditRepairsContentAndEvictsForeignEntries(t *testing.T) {
	e := newEnv(t)
	e.exec(`INSERT INTO catalog.items (tenant_id, item_id, version, display) VALUES
		('acme', 'bulk', 1, '{"title": "old"}'), ('acme', 'sku-7', 1, '{"title": "Chair"}'),
		('acme', 'fine', 1, '{"title": "fine"}'), ('acme', 'rolled', 2, '{"title": "r"}')`)
	e.fillPayload("acme", "bulk", 1, `{"title": "old"}`)
	e.fillPayload("acme", "sku-7", 1, `{"price_label": "$7", "title": "Lamp 7"}`) // shop.products' sku-7
	e.fillPayload("acme", "fine", 1, `{"title": "fine"}`)
	e.fillPayload("acme", "rolled", 9, `{"title": "r"}`)
	e.fillPayload("nobody", "ghost", 3, `{"title": "ghost"}`)
	e.exec(`BEGIN; SET LOCAL session_replication_role = replica;
		UPDATE catalog.items SET display = '{"title": "BULK-LOADED"}' WHERE item_id = 'bulk'; COMMIT`)

	cfg := audit.DefaultConfig()
	cfg.Rate, cfg.Batch = 50, 10
	reg := prometheus.NewRegistry()
	e.auditor(cfg, reg)
	testenv.Eventually(t, 20*time.Second, "every planted entry evicted", func() error {
		for _, kind := range []string{audit.KindContent, audit.KindWrongTenant, audit.KindAhead} {
			want := 1.0
			if kind == audit.KindContent {
				want = 2
			}
			if got := counter(t, reg, "tidemark_audit_evictions_total", "kind", kind); got < want {
				return fmt.Errorf("evictions{%s} = %v, want %v", kind, got, want)
			}
		}
		return nil
	})
	for _, kind := range []string{audit.KindContent, audit.KindWrongTenant, audit.KindAhead} {
		if v, ev := counter(t, reg, "tidemark_audit_violations_total", "kind", kind), counter(t, reg, "tidemark_audit_evictions_total", "kind", kind); v != ev {
			t.Errorf("violations{%s} = %v, evictions %v: each found once, then gone", kind, v, ev)
		}
	}
	ctx := context.Background()
	for _, k := range [][2]string{{"acme", "bulk"}, {"acme", "sku-7"}, {"acme", "rolled"}, {"nobody", "ghost"}} {
		lr, err := e.cc.Lookup(ctx, k[0], k[1], 0)
		if err != nil {
			t.Fatal(err)
		}
		if lr.Status != cache.StatusMiss {
			t.Errorf("%s/%s after the audit: %s v%d, want a miss (evicted)", k[0], k[1], lr.Status, lr.Entry.Version)
		}
	}
	if lr, err := e.cc.Lookup(ctx, "acme", "fine", 0); err != nil || lr.Status != cache.StatusHit {
		t.Errorf("acme/fine (display matches) after the audit: %+v %v, want a hit", lr.Status, errors.Join(err))
	}
	if got := counter(t, reg, "tidemark_audit_violations_total", "kind", audit.KindBehindServable); got != 0 {
		t.Errorf("violations{behind_servable} = %v, want 0", got)
	}
}
