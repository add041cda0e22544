package status

import (
	"context"
	"fmt"
	"time"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/promise"
	"github.com/tidemark/tidemark/rollout"
)

// Namespace is one cache-tier namespace of the serve processes' source
// pool: during a namespace upgrade the new one is serving and the old one
// draining, then drained (package rollout), each with the watermark its own
// appliers publish.
type Namespace struct {
	rollout.Namespace
	// WatermarkAgeS is the age of the namespace's own watermark (nil: none
	// known, e.g. its appliers have stopped or not caught up yet).
	WatermarkAgeS *float64 `json:"watermark_age_seconds"`
}

// String is the line status prints.
func (n Namespace) String() string {
	return fmt.Sprintf("%s; watermark age %s", n.Namespace, age(n.WatermarkAgeS))
}

// readNamespaces lists the pool's namespaces and each one's watermark age.
func readNamespaces(ctx context.Context, cfg Config, now time.Time) ([]Namespace, error) {
	rdb, err := cfg.openRedis()
	if err != nil {
		return nil, err
	}
	defer rdb.Close()
	pool := cfg.SourcePool
	if pool == "" {
		pool = promise.SourcePool
	}
	all, err := rollout.Namespaces(ctx, rdb, pool)
	if err != nil {
		return nil, err
	}
	out := make([]Namespace, 0, len(all))
	for _, n := range all {
		ns := Namespace{Namespace: n}
		if n.Name != "" {
			ccfg := cache.DefaultConfig()
			ccfg.Namespace = n.Name
			cc, err := cache.New(ccfg, cache.Deps{Redis: rdb})
			if err != nil {
				return nil, err
			}
			wm, err := cc.ReadWatermark(ctx)
			if err != nil {
				return nil, err
			}
			if wm.Known {
				a := now.Sub(wm.W).Seconds()
				ns.WatermarkAgeS = &a
			}
		}
		out = append(out, ns)
	}
	return out, nil
}

// upgrade makes a namespace upgrade part of the reason (the verdict is the
// namespace's own): which namespaces are live, and which drain.
func (rep *Report) upgrade(cfg Config) {
	if len(rep.Namespaces) < 2 && (len(rep.Namespaces) == 0 || rep.Namespaces[0].Name == cfg.Namespace) {
		return
	}
	for _, n := range rep.Namespaces {
		if n.Name == cfg.Namespace {
			continue
		}
		switch n.State {
		case rollout.NamespaceServing:
			rep.Reason += fmt.Sprintf("; namespace upgrade: %s is still served by %d process(es)", n.Name, n.Processes)
		case rollout.NamespaceDraining:
			rep.Reason += fmt.Sprintf("; namespace upgrade: %s draining until %s (keep its appliers running)", n.Name, n.DrainedAt.UTC().Format(time.RFC3339))
		}
	}
}
