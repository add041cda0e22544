package main

import (
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/hotset"
	"github.com/tidemark/tidemark/lab/testenv"
)

// `tidemark inspect --hot` prints the merged hot set, hottest first, with
// tenants, rates and published replicas, filters by --tenant, and prints
// every master's command rate.
func TestInspectHot(t *testing.T) {
	r := testenv.StartRedis(t)
	tr, err := hotset.New(hotset.DefaultConfig(), hotset.Deps{Redis: r.Client(t), Log: nil, Registerer: nil})
	if err != nil {
		t.Fatal(err)
	}
	for range 50 {
		tr.Observe("acme", "sku-1")
	}
	for range 20 {
		tr.Observe("globex", "sku-2")
	}
	if err := tr.Merge(testenv.Context(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	// acme/sku-1 has a published set of 3 copies.
	ctx := testenv.Context(t, 10*time.Second)
	cc, err := cache.New(cache.DefaultConfig(), cache.Deps{Redis: r.Client(t), Log: nil, Registerer: nil})
	if err != nil {
		t.Fatal(err)
	}
	lr, err := cc.Lookup(ctx, "acme", "sku-1", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := cc.Fill(ctx, "acme", "sku-1", lr.Token, 1, []byte(`"one"`), time.Now()); err != nil {
		t.Fatal(err)
	}
	snap, err := cc.ReplicaSource(ctx, "acme", "sku-1", time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cc.BuildReplicas(ctx, "acme", "sku-1", snap.Entry, 3); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCLI(t, "inspect", "--hot", "--redis", r.URL(), "--top", "5")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 6 || !strings.Contains(lines[1], "acme") || !strings.Contains(lines[1], "sku-1") || !strings.HasSuffix(lines[1], " 3") ||
		!strings.Contains(lines[2], "globex") || !strings.HasSuffix(lines[2], " 0") ||
		!strings.HasPrefix(lines[4], "node") || !strings.HasPrefix(lines[5], r.Addr) {
		t.Fatalf("inspect --hot printed:\n%s", out)
	}
	code, out, _ = runCLI(t, "inspect", "--hot", "--redis", r.URL(), "--tenant", "globex", "--json")
	if code != 0 || !strings.Contains(out, `"item": "sku-2"`) || strings.Contains(out, "acme") {
		t.Fatalf("inspect --hot --tenant globex --json (exit %d):\n%s", code, out)
	}
	if code, _, errs := runCLI(t, "inspect", "--hot", "--top", "0"); code != 2 || !strings.Contains(errs, "--redis") || !strings.Contains(errs, "--top") {
		t.Fatalf("inspect --hot --top 0 without --redis: exit %d, %s", code, errs)
	}
}
