// Package rollout keeps each tenant's serving mode (docs/design.md,
// "Rollout, rollback and upgrades"): `source` (every read from the source,
// under the budget: the rollback), `shadow` (answers from the source, a
// sample also compared with the cache tier) and `cache` with a ramp (that
// share of the tenant's items read through the cache). The settings and the
// shadow comparison's per-tenant counts live in the cache tier, in two hashes
// named by the deployment's source pool, which every serve process polls;
// the settings are also recorded in Postgres (durable.go), so a copy the
// cache tier lost is found and restored, never silently undone.
package rollout

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Mode is how a tenant's reads are served.
type Mode string

const (
	ModeSource Mode = "source" // every read from the source under the budget
	ModeShadow Mode = "shadow" // answers from the source; a sample compared with the cache
	ModeCache  Mode = "cache"  // Ramp percent of the tenant's items through the cache, the rest as source
)

// ParseMode accepts the three mode names.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(strings.ToLower(strings.TrimSpace(s))); m {
	case ModeSource, ModeShadow, ModeCache:
		return m, nil
	}
	return "", fmt.Errorf("rollout: unknown mode %q (source, shadow or cache)", s)
}

// Shadow comparison outcomes (the outcome label of
// tidemark_api_shadow_checks_total and the per-tenant counts of the store).
const (
	OutcomeMatch   = "match"
	OutcomeOlder   = "cache_older_than_allowed" // the cache would serve a version the source replaced more than the grace ago, or claims a deadline beyond the promise
	OutcomeNewer   = "cache_newer_than_source"  // the cache holds a version the source does not
	OutcomeMissing = "missing"                  // nothing cached to compare
)

// Outcomes lists every outcome, in the order status shows them.
var Outcomes = []string{OutcomeMatch, OutcomeOlder, OutcomeNewer, OutcomeMissing}

// Mismatch reports whether an outcome counts against a ramp (missing does
// not: an uncached key is the cache's normal state).
func Mismatch(outcome string) bool { return outcome == OutcomeOlder || outcome == OutcomeNewer }

// AllTenants is the tenant name of the setting that applies to every tenant
// without one of its own.
const AllTenants = "*"

// Setting is one tenant's serving mode.
type Setting struct {
	Mode Mode    `json:"mode"`
	Ramp float64 `json:"ramp"` // percent of the tenant's items read through the cache (ModeCache)
	// Safe is the ramp step before the last raise: where a halt falls back to.
	Safe float64 `json:"safe"`
	// Halted says why the shadow comparison stopped this tenant's ramp (empty:
	// it was not); a raise then needs Force.
	Halted  string    `json:"halted,omitempty"`
	Updated time.Time `json:"updated"`
}

// Default is today's behaviour for a tenant without a setting.
var Default = Setting{Mode: ModeCache, Ramp: 100, Safe: 100}

// Validate checks the mode and the ramp.
func (s Setting) Validate() error {
	if _, err := ParseMode(string(s.Mode)); err != nil {
		return err
	}
	if !(s.Ramp >= 0 && s.Ramp <= 100) || !(s.Safe >= 0 && s.Safe <= 100) {
		return fmt.Errorf("rollout: ramp must be between 0 and 100 percent (got %v, safe %v)", s.Ramp, s.Safe)
	}
	return nil
}

// String is the one-line form `tidemark rollout status` prints.
func (s Setting) String() string {
	out := string(s.Mode)
	if s.Mode == ModeCache {
		out += fmt.Sprintf(" %g%% (safe step %g%%)", s.Ramp, s.Safe)
	}
	if s.Halted != "" {
		out += "; HALTED: " + s.Halted
	}
	return out
}

// buckets is the ramp's resolution: 0.01 % of a tenant's items.
const buckets = 10000

// Route is the mode one read of (tenant, item) is served in: a ramp sends
// the same items through the cache on every process and every request (by a
// hash of the key), so a given item does not flip between paths.
func (s Setting) Route(tenant, item string) Mode {
	if s.Mode != ModeCache {
		return s.Mode
	}
	if s.Ramp >= 100 {
		return ModeCache
	}
	if s.Ramp <= 0 {
		return ModeSource
	}
	h := fnv.New64a()
	h.Write([]byte(tenant))
	h.Write([]byte{0})
	h.Write([]byte(item))
	if float64(h.Sum64()%buckets) < s.Ramp*buckets/100 {
		return ModeCache
	}
	return ModeSource
}

// Settings is every stored setting by tenant (AllTenants included).
type Settings map[string]Setting

// For is the setting of tenant: its own, else the all-tenants one, else def.
func (ss Settings) For(tenant string, def Setting) Setting {
	if s, ok := ss[tenant]; ok {
		return s
	}
	if s, ok := ss[AllTenants]; ok {
		return s
	}
	return def
}

// Counts is shadow comparisons by outcome.
type Counts map[string]int64

// Total is every comparison.
func (c Counts) Total() int64 {
	var n int64
	for _, v := range c {
		n += v
	}
	return n
}

// Mismatches is the comparisons that count against a ramp.
func (c Counts) Mismatches() int64 { return c[OutcomeOlder] + c[OutcomeNewer] }

// String is "N checked: a match, b cache_older_than_allowed, ...".
func (c Counts) String() string {
	parts := make([]string, 0, len(Outcomes))
	for _, o := range Outcomes {
		parts = append(parts, fmt.Sprintf("%d %s", c[o], o))
	}
	return fmt.Sprintf("%d checked: %s", c.Total(), strings.Join(parts, ", "))
}

//go:embed set.lua
var setLua string

// ErrHalted refuses raising the ramp of a tenant whose ramp was halted,
// unless the caller forces it.
var ErrHalted = errors.New("rollout: the tenant's ramp was halted by shadow mismatches")

// errChanged: another writer changed the setting between read and write.
var errChanged = errors.New("rollout: setting changed concurrently")

// marker is a field of the settings hash every write sets: a hash without
// it was lost by the cache tier (the scripts spell it too).
const marker = "_written"

// Store reads and writes the settings and shadow counts of one source pool.
// Both hashes share a hash tag, so Cluster keeps them in one slot and the
// set script can touch both.
type Store struct {
	rdb    redis.UniversalClient
	pool   string
	modes  string
	shadow string
	gen    string // the copy's generation (durable.go)
	lost   string // the note of the last loss a serve process restored
	set    *redis.Script
	db     DB // the durable record; nil: the cache tier's copy only (WithDB)
}

// NewStore is the store of pool (api.Config's source pool: the deployment's
// name, shared by every namespace of an upgrade).
func NewStore(rdb redis.UniversalClient, pool string) *Store {
	tag := "{" + pool + ":v1:_rollout}" // under the ACL key pattern {<ns>:v1:* (cache.ACLRules)
	return &Store{rdb: rdb, pool: pool, modes: tag + ":modes", shadow: tag + ":shadow", gen: tag + ":gen", lost: tag + ":lost",
		set: redis.NewScript(setLua)}
}

// Load reads every setting of the cache tier's copy; written reports
// whether the hash has ever been written (it carries the marker).
func (s *Store) Load(ctx context.Context) (ss Settings, written bool, err error) {
	c, err := s.Copy(ctx)
	return c.Settings, c.Written, err
}

// parseHash is the settings of the copy's hash.
func parseHash(raw map[string]string) (ss Settings, written bool, err error) {
	ss = make(Settings, len(raw))
	for tenant, v := range raw {
		if tenant == marker {
			written = true
			continue
		}
		var st Setting
		if err := json.Unmarshal([]byte(v), &st); err != nil {
			return nil, written, fmt.Errorf("rollout: setting of tenant %q: %w", tenant, err)
		}
		ss[tenant] = st
	}
	return ss, written, nil
}

// Set stores tenant's next mode and ramp (AllTenants for every tenant
// without its own) and returns what was stored. A raise of a cache ramp
// remembers the previous step as the safe one; a tenant halted by the
// shadow comparison is only raised with force. The tenant's shadow counts
// restart, so the halt judges each step by its own comparisons.
func (s *Store) Set(ctx context.Context, tenant string, mode Mode, ramp float64, force bool, now time.Time) (Setting, error) {
	if err := s.sync(ctx); err != nil {
		return Setting{}, err
	}
	for range 10 {
		cur, raw, err := s.get(ctx, tenant)
		if err != nil {
			return Setting{}, err
		}
		next := Setting{Mode: mode, Ramp: ramp, Updated: now.UTC()}
		if mode != ModeCache {
			next.Ramp = 0
		}
		switch {
		case mode == ModeCache && cur.Mode == ModeCache && next.Ramp > cur.Ramp:
			if cur.Halted != "" && !force {
				return cur, fmt.Errorf("%w (%s): set it again with force to raise it past %g%%", ErrHalted, cur.Halted, cur.Ramp)
			}
			next.Safe = cur.Ramp
		case mode == ModeCache && cur.Mode == ModeCache:
			next.Safe = min(cur.Safe, next.Ramp) // a step down is safe as far as the old safe step goes
		}
		if err := next.Validate(); err != nil {
			return Setting{}, err
		}
		gen, err := s.cas(ctx, tenant, raw, next, true)
		if errors.Is(err, errChanged) {
			continue
		}
		if err != nil {
			return Setting{}, err
		}
		return next, s.persist(ctx, gen)
	}
	return Setting{}, fmt.Errorf("rollout: set tenant %q: %w ten times", tenant, errChanged)
}

// Halt falls a tenant's ramp back to its safe step and records why, only if
// its setting is still seen (a concurrent operator change wins). halted
// reports whether this call changed it.
func (s *Store) Halt(ctx context.Context, tenant string, seen Setting, reason string, now time.Time) (halted bool, err error) {
	_, raw, err := s.get(ctx, tenant)
	if err != nil {
		return false, err
	}
	if raw != "" {
		b, err := json.Marshal(seen)
		if err != nil {
			return false, fmt.Errorf("rollout: %w", err)
		}
		if string(b) != raw {
			return false, nil
		}
	}
	next := seen
	next.Ramp, next.Halted, next.Updated = seen.Safe, reason, now.UTC()
	gen, err := s.cas(ctx, tenant, raw, next, true)
	if errors.Is(err, errChanged) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, s.persist(ctx, gen)
}

// get is tenant's own stored setting (Default and "" when it has none).
func (s *Store) get(ctx context.Context, tenant string) (Setting, string, error) {
	raw, err := s.rdb.HGet(ctx, s.modes, tenant).Result()
	if errors.Is(err, redis.Nil) {
		all, err := s.rdb.HGet(ctx, s.modes, AllTenants).Result()
		if errors.Is(err, redis.Nil) || tenant == AllTenants {
			return Default, "", nil
		}
		if err != nil {
			return Setting{}, "", fmt.Errorf("rollout: read setting: %w", err)
		}
		var st Setting
		if err := json.Unmarshal([]byte(all), &st); err != nil {
			return Setting{}, "", fmt.Errorf("rollout: all-tenants setting: %w", err)
		}
		return st, "", nil
	}
	if err != nil {
		return Setting{}, "", fmt.Errorf("rollout: read setting of tenant %q: %w", tenant, err)
	}
	var st Setting
	if err := json.Unmarshal([]byte(raw), &st); err != nil {
		return Setting{}, "", fmt.Errorf("rollout: setting of tenant %q: %w", tenant, err)
	}
	return st, raw, nil
}

// cas stores next if tenant's stored JSON is still expected and returns
// the copy's new generation.
func (s *Store) cas(ctx context.Context, tenant, expected string, next Setting, clear bool) (int64, error) {
	b, err := json.Marshal(next)
	if err != nil {
		return 0, fmt.Errorf("rollout: %w", err)
	}
	args := []any{tenant, expected, string(b), marker, clear}
	for _, o := range Outcomes {
		args = append(args, o)
	}
	gen, err := s.set.Run(ctx, s.rdb, []string{s.modes, s.shadow, s.gen, s.lost}, args...).Int64()
	if err != nil {
		return 0, fmt.Errorf("rollout: write setting of tenant %q: %w", tenant, err)
	}
	if gen == 0 {
		return 0, errChanged
	}
	return gen, nil
}

// Record adds shadow comparison counts by tenant (one round trip).
func (s *Store) Record(ctx context.Context, byTenant map[string]Counts) error {
	if len(byTenant) == 0 {
		return nil
	}
	pipe := s.rdb.Pipeline()
	for tenant, c := range byTenant {
		for o, n := range c {
			if n != 0 {
				pipe.HIncrBy(ctx, s.shadow, tenant+"\x00"+o, n)
			}
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("rollout: record shadow counts: %w", err)
	}
	return nil
}

// Shadow reads every tenant's shadow counts since its setting last changed.
func (s *Store) Shadow(ctx context.Context) (map[string]Counts, error) {
	raw, err := s.rdb.HGetAll(ctx, s.shadow).Result()
	if err != nil {
		return nil, fmt.Errorf("rollout: read shadow counts: %w", err)
	}
	out := map[string]Counts{}
	for k, v := range raw {
		tenant, outcome, ok := strings.Cut(k, "\x00")
		if !ok {
			continue
		}
		var n int64
		if _, err := fmt.Sscan(v, &n); err != nil {
			continue
		}
		if out[tenant] == nil {
			out[tenant] = Counts{}
		}
		out[tenant][outcome] = n
	}
	return out, nil
}

// TenantStatus is one tenant's line of `tidemark rollout status`.
type TenantStatus struct {
	Tenant  string  `json:"tenant"`
	Setting Setting `json:"setting"`
	Shadow  Counts  `json:"shadow"`
}

// Status is every tenant with a setting or shadow counts, sorted by name:
// the settings in force (Report).
func (s *Store) Status(ctx context.Context) ([]TenantStatus, error) {
	r, err := s.Report(ctx)
	return r.Tenants, err
}

// tenants is every tenant of ss or with shadow counts, sorted by name.
func (s *Store) tenants(ctx context.Context, ss Settings) ([]TenantStatus, error) {
	sh, err := s.Shadow(ctx)
	if err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for t := range ss {
		names[t] = true
	}
	for t := range sh {
		names[t] = true
	}
	out := make([]TenantStatus, 0, len(names))
	for t := range names {
		st := ss.For(t, Default)
		if t == AllTenants {
			st = ss[AllTenants]
		}
		c := sh[t]
		if c == nil {
			c = Counts{}
		}
		out = append(out, TenantStatus{Tenant: t, Setting: st, Shadow: c})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Tenant < out[j].Tenant })
	return out, nil
}
