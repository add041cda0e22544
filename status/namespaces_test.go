package status

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/rollout"
)

// A namespace upgrade in `tidemark status`, the page and status.json: the
// namespace a live serve process stamps is serving, one whose last process
// left within the hard lifetime (and the stamp's margin) is draining, one
// longer ago drained.
func TestNamespaceUpgradeShown(t *testing.T) {
	r := testenv.StartRedis(t)
	ctx := testenv.Context(t, 20*time.Second)
	cfg := DefaultConfig()
	cfg.Redis, cfg.Namespace, cfg.SourcePool = "redis://"+r.Addr+"/0", "catalog3", "catalog"
	rdb, err := cache.ParseRedisURL(cfg.Redis)
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	// catalog3 has a live serve process; catalog2's last one left 10 s ago,
	// catalog's a minute ago.
	if err := rollout.StampNamespace(ctx, rdb, "catalog", "catalog3"); err != nil {
		t.Fatal(err)
	}
	rdb.ZAdd(ctx, rollout.ServeKey("catalog"), redis.Z{Score: float64(now.UnixMilli()), Member: rollout.ServeMember("catalog3", "p1")})
	rdb.ZAdd(ctx, rollout.ServeKey("catalog"), redis.Z{Score: float64(now.Add(-10 * time.Second).UnixMilli()), Member: rollout.ServeMember("catalog2", "p2")})
	rdb.HSet(ctx, rollout.NamespacesKey("catalog"), "catalog2", strconv.FormatInt(now.Add(-10*time.Second).UnixMilli(), 10),
		"catalog", strconv.FormatInt(now.Add(-time.Minute).UnixMilli(), 10))
	ns, err := readNamespaces(ctx, cfg, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, n := range ns {
		got[n.Name] = n.State
	}
	want := map[string]string{"catalog3": rollout.NamespaceServing, "catalog2": rollout.NamespaceDraining, "catalog": rollout.NamespaceDrained}
	for name, st := range want {
		if got[name] != st {
			t.Errorf("namespace %s is %q, want %q (all: %v)", name, got[name], st, got)
		}
	}
	rep := Report{Verdict: OK, Reason: "watermark age 1s", Namespaces: ns}
	rep.upgrade(cfg)
	if !strings.Contains(rep.Reason, "catalog2 draining until") {
		t.Errorf("the reason does not say the old namespace drains: %q", rep.Reason)
	}
	var text, js, page strings.Builder
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	if err := pageTmpl.Execute(&page, pageView{Report: &rep}); err != nil {
		t.Fatal(err)
	}
	for where, out := range map[string]string{"status text": text.String(), "page": page.String()} {
		for _, s := range []string{"catalog3: serving (1 serve process(es))", "catalog2: draining (no serve process since", "catalog: drained at"} {
			if !strings.Contains(out, s) {
				t.Errorf("%s lacks %q:\n%s", where, s, out)
			}
		}
	}
	for _, s := range []string{`"namespace": "catalog2"`, `"state": "draining"`, `"serve_processes": 1`} {
		if !strings.Contains(js.String(), s) {
			t.Errorf("status.json lacks %s:\n%s", s, js.String())
		}
	}
}
