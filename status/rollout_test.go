package status

import (
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/rollout"
)

// Each tenant's serving mode, ramp and shadow figures are lines of
// `tidemark status`, rows of the page and part of /status.json.
func TestRolloutShown(t *testing.T) {
	r := testenv.StartRedis(t)
	ctx := testenv.Context(t, 20*time.Second)
	cfg := DefaultConfig()
	cfg.Redis = "redis://" + r.Addr + "/0"
	rdb, err := cache.ParseRedisURL(cfg.Redis)
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	st := rollout.NewStore(rdb, cfg.Namespace)
	if _, err := st.Set(ctx, "acme", rollout.ModeCache, 10, false, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Set(ctx, "globex", rollout.ModeSource, 0, false, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := st.Record(ctx, map[string]rollout.Counts{"acme": {rollout.OutcomeMatch: 97, rollout.OutcomeOlder: 3}}); err != nil {
		t.Fatal(err)
	}
	ro, err := readRollout(ctx, cfg)
	if err != nil || len(ro) != 2 {
		t.Fatalf("readRollout = %+v, %v; want acme and globex", ro, err)
	}
	rep := Report{Verdict: OK, Rollout: ro}
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
	acme := "acme: cache 10% (safe step 10%); shadow 100 checked: 97 match, 3 cache_older_than_allowed, 0 cache_newer_than_source, 0 missing"
	for where, got := range map[string]string{"status text": text.String(), "page": page.String()} {
		for _, s := range []string{acme, "globex: source; shadow 0 checked"} {
			if !strings.Contains(got, s) {
				t.Errorf("%s lacks %q:\n%s", where, s, got)
			}
		}
	}
	for _, s := range []string{`"tenant": "acme"`, `"ramp_percent": 10`, `"cache_older_than_allowed": 3`} {
		if !strings.Contains(js.String(), s) {
			t.Errorf("status.json lacks %s:\n%s", s, js.String())
		}
	}
}
