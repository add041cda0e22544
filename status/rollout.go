package status

import (
	"context"
	"fmt"

	"github.com/tidemark/tidemark/promise"
	"github.com/tidemark/tidemark/rollout"
)

// Rollout is one tenant's serving mode and the shadow comparison of its
// current step (package rollout), as `tidemark rollout status` shows them.
type Rollout struct {
	Tenant  string          `json:"tenant"`
	Mode    string          `json:"mode"`
	Ramp    float64         `json:"ramp_percent"`
	Safe    float64         `json:"safe_step_percent"`
	Halted  string          `json:"halted,omitempty"`
	Shadow  rollout.Counts  `json:"shadow"`
	Setting rollout.Setting `json:"-"`
}

// String is the one-line summary status prints.
func (r Rollout) String() string {
	return fmt.Sprintf("%s: %s; shadow %s", r.Tenant, r.Setting, r.Shadow)
}

// readRollout reads every tenant with a setting or shadow counts (none:
// every tenant is served by serve's default mode).
func readRollout(ctx context.Context, cfg Config) ([]Rollout, error) {
	rdb, err := cfg.openRedis()
	if err != nil {
		return nil, err
	}
	defer rdb.Close()
	pool := cfg.SourcePool
	if pool == "" {
		pool = promise.SourcePool
	}
	all, err := rollout.NewStore(rdb, pool).Status(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Rollout, 0, len(all))
	for _, t := range all {
		out = append(out, Rollout{Tenant: t.Tenant, Mode: string(t.Setting.Mode), Ramp: t.Setting.Ramp, Safe: t.Setting.Safe,
			Halted: t.Setting.Halted, Shadow: t.Shadow, Setting: t.Setting})
	}
	return out, nil
}
