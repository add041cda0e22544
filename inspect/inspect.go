// Package inspect is the staleness inspector, in the spirit of Uber's Cache
// Inspector and Meta's Polaris: it samples cached entries, compares each with
// the source of truth, and reports any entry that is behind the source, and
// in particular any that would still be served while older than the SLO.
package inspect

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/catalog"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/pgprimary"
	"github.com/tidemark/tidemark/promise"
	"github.com/tidemark/tidemark/schema"
)

// Config of one inspection.
type Config struct {
	Redis     string
	RedisConn cache.RedisConfig // TLS, credentials, mode (its URL is Redis)
	PG        string
	Namespace string
	Sample    int    // entries to check
	Tenant    string // only this tenant's entries
	SLO       time.Duration
	Table     catalog.Table // the catalog table mapping
}

// DefaultConfig matches the pipeline's defaults.
func DefaultConfig() Config {
	return Config{Namespace: promise.Namespace, Sample: 1000, SLO: promise.Bound, Table: catalog.DefaultTable()}
}

// Validate reports every problem at once, one config.FieldError per field.
func (c Config) Validate() error {
	var p config.Problems
	if c.Redis == "" {
		p.Add("Redis", "is required")
	}
	if c.PG == "" {
		p.Add("PG", "is required")
	} else if _, err := pgx.ParseConfig(c.PG); err != nil {
		p.Add("PG", "%v", err)
	}
	if c.Sample < 1 {
		p.Add("Sample", "must be at least 1 (got %d)", c.Sample)
	}
	p.Positive("SLO", c.SLO)
	p.Nested("Table", c.Table.Validate())
	return p.Err()
}

// Finding is one entry that disagrees with the source.
type Finding struct {
	Tenant        string  `json:"tenant"`
	Item          string  `json:"item"`
	CachedVersion int64   `json:"cached_version"` // 0 for a not-found entry
	NotFound      bool    `json:"cached_not_found"`
	SourceVersion int64   `json:"source_version"` // 0: absent from the source
	SourceState   string  `json:"source_state,omitempty"`
	BehindForS    float64 `json:"behind_for_seconds"` // since the newer source version was written (updated_at)
	Invalidated   bool    `json:"invalidated"`        // floor or stale flag already says so
	ServedForS    float64 `json:"would_be_served_for_seconds"`
	Violation     bool    `json:"slo_violation"` // would still be served while older than the SLO
}

// Report is the result of an inspection.
type Report struct {
	Checked    int        `json:"checked"`
	Consistent int        `json:"consistent"`
	Expired    int        `json:"expired"` // behind the source but past its hard deadline: never served again
	Behind     int        `json:"behind"`  // behind the source and still servable
	Ahead      int        `json:"ahead"`   // cached newer than the source: a rollback or a bug
	Violations int        `json:"slo_violations"`
	Findings   []Finding  `json:"findings"`
	Watermark  *time.Time `json:"watermark,omitempty"`
	SLOSeconds float64    `json:"slo_seconds"`
}

// Entry is the part of an item hash the inspector (and the auditor, package
// audit) reads.
type Entry struct {
	Tenant, Item string
	V, Floor     int64
	Obs, Hard    int64 // unix ms
	NF, Stale    bool
}

// Run samples up to cfg.Sample entries and checks them.
func Run(ctx context.Context, cfg Config, log *slog.Logger) (Report, error) {
	if err := cfg.Validate(); err != nil {
		return Report{}, err
	}
	rep := Report{SLOSeconds: cfg.SLO.Seconds()}
	rc := cfg.RedisConn
	rc.URL = cfg.Redis
	rdb, err := cache.OpenRedis(rc, log)
	if err != nil {
		return rep, err
	}
	defer rdb.Close()
	ccfg := cache.DefaultConfig()
	ccfg.Namespace = cfg.Namespace
	cc, err := cache.New(ccfg, cache.Deps{Redis: rdb, Log: log, Registerer: nil})
	if err != nil {
		return rep, fmt.Errorf("inspect: %w", err)
	}
	wm, err := cc.ReadWatermark(ctx)
	if err != nil {
		return rep, fmt.Errorf("inspect: %w", err)
	}
	if wm.Known {
		w := wm.W.UTC()
		rep.Watermark = &w
	}
	entries, err := sample(ctx, rdb, cfg)
	if err != nil {
		return rep, err
	}
	src, err := sourceVersions(ctx, cfg, entries)
	if err != nil {
		return rep, err
	}
	now := time.Now()
	for _, e := range entries {
		rep.Checked++
		s := src[schema.Key(e.Tenant, e.Item)]
		f := Judge(e, s, wm, cfg.SLO, now)
		switch {
		case f == nil:
			rep.Consistent++
			continue
		case f.ServedForS == 0 && f.SourceVersion >= f.CachedVersion:
			rep.Expired++
			continue
		case f.SourceVersion < f.CachedVersion:
			rep.Ahead++
		default:
			rep.Behind++
		}
		if f.Violation {
			rep.Violations++
		}
		rep.Findings = append(rep.Findings, *f)
	}
	return rep, nil
}

// SourceRow is an item's row in the source as the inspector reads it.
type SourceRow struct {
	Version int64
	State   string
	Updated time.Time
	Found   bool // false: no row at all (not even a tombstone)
}

// Judge compares one cached entry with its source row; nil means consistent.
// Read the entry before the row: the source only moves forward, so an entry
// ahead of a later read is a real anomaly.
func Judge(e Entry, s SourceRow, wm cache.Watermark, slo time.Duration, now time.Time) *Finding {
	absent := !s.Found || s.State == "deleted"
	if e.NF && absent || !e.NF && s.Found && !absent && e.V == s.Version {
		return nil
	}
	f := &Finding{Tenant: e.Tenant, Item: e.Item, CachedVersion: e.V, NotFound: e.NF,
		SourceVersion: s.Version, SourceState: s.State}
	if e.NF {
		f.CachedVersion = 0
	}
	if s.Found && s.Version > e.V {
		f.BehindForS = max(0, now.Sub(s.Updated).Seconds())
	}
	f.Invalidated = e.Stale || (s.Found && e.Floor >= s.Version)
	// The deadline a lookup would compute (docs/design.md): the watermark
	// extends an entry that was not invalidated and is not older than a gap.
	eff := e.Obs
	w := wm.W.UnixMilli()
	if wm.Known && w > e.Obs && e.Obs >= wm.ResetAt.UnixMilli() && !e.Stale && !e.NF {
		eff = w
	}
	hard := e.Hard + (eff - e.Obs)
	if left := hard - now.UnixMilli(); left > 0 {
		f.ServedForS = float64(left) / 1000
	}
	f.Violation = f.ServedForS > 0 && f.BehindForS > slo.Seconds()
	return f
}

// sample SCANs the namespace's item hashes (every master on a Cluster) and
// reads the fields the judgement needs.
func sample(ctx context.Context, rdb redis.UniversalClient, cfg Config) ([]Entry, error) {
	pattern := schema.RedisKeyPattern(cfg.Namespace)
	if cfg.Tenant != "" {
		pattern = cfg.Namespace + ":v1:{" + schema.Escape(cfg.Tenant) + "/*}"
	}
	var (
		mu   sync.Mutex
		keys []string
	)
	scan := func(ctx context.Context, c *redis.Client) error {
		it := c.Scan(ctx, 0, pattern, 500).Iterator()
		for it.Next(ctx) {
			mu.Lock()
			full := len(keys) >= cfg.Sample
			if !full {
				keys = append(keys, it.Val())
			}
			mu.Unlock()
			if full {
				break
			}
		}
		return it.Err()
	}
	var err error
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		// Every master through the Cluster client's own node clients, so
		// TLS and the ACL user apply to them too.
		err = c.ForEachMaster(ctx, scan)
	case *redis.Client:
		err = scan(ctx, c)
	default:
		err = fmt.Errorf("unsupported redis client %T", rdb)
	}
	if err != nil {
		return nil, fmt.Errorf("inspect: scan %s: %w", pattern, err)
	}
	return ReadEntries(ctx, rdb, cfg.Namespace, keys)
}

// ReadEntries reads the named item hashes in one pipeline. Keys that are not
// item hashes of ns, hold only a floor (no value) or are gone are left out.
func ReadEntries(ctx context.Context, rdb redis.UniversalClient, ns string, keys []string) ([]Entry, error) {
	fields := []string{schema.FieldVersion, schema.FieldFloor, schema.FieldObs, schema.FieldHard, schema.FieldNotFound, schema.FieldStale}
	cmds := make([]*redis.SliceCmd, len(keys))
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = p.HMGet(ctx, k, fields...)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("inspect: read entries: %w", err)
	}
	var out []Entry
	for i, k := range keys {
		tenant, item, err := schema.ParseRedisKey(ns, k)
		if err != nil {
			continue // not an item hash of ours
		}
		vals, err := cmds[i].Result()
		if err != nil || len(vals) != len(fields) || vals[0] == nil {
			continue // floor-only entry (no value cached) or gone meanwhile
		}
		e := Entry{Tenant: tenant, Item: item,
			V: num(vals[0]), Floor: num(vals[1]), Obs: num(vals[2]), Hard: num(vals[3]),
			NF: vals[4] == "1", Stale: vals[5] == "1"}
		out = append(out, e)
	}
	return out, nil
}

func num(v any) int64 {
	s, _ := v.(string)
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// sourceVersions reads the current version of every sampled item in one query.
func sourceVersions(ctx context.Context, cfg Config, entries []Entry) (map[string]SourceRow, error) {
	if len(entries) == 0 {
		return map[string]SourceRow{}, nil
	}
	conn, err := pgx.Connect(ctx, cfg.PG)
	if err != nil {
		return nil, fmt.Errorf("inspect: connect to postgres: %w", err)
	}
	defer conn.Close(context.Background())
	// A standby's lagging rows would make a fresh cache entry look stale.
	if err := pgprimary.Check(ctx, conn); err != nil {
		return nil, fmt.Errorf("inspect: %w", err)
	}
	return SourceRows(ctx, conn, cfg.Table, entries)
}

// Querier is what SourceRows needs: a *pgx.Conn or a *pgxpool.Pool.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// SourceRows reads the row of every entry's item from table in one query,
// keyed by schema.Key(tenant, item); an item without a row is absent.
func SourceRows(ctx context.Context, q Querier, table catalog.Table, entries []Entry) (map[string]SourceRow, error) {
	out := make(map[string]SourceRow, len(entries))
	if len(entries) == 0 {
		return out, nil
	}
	tenants := make([]string, len(entries))
	items := make([]string, len(entries))
	for i, e := range entries {
		tenants[i], items[i] = e.Tenant, e.Item
	}
	rows, err := q.Query(ctx, table.VersionsSQL(), tenants, items)
	if err != nil {
		return nil, fmt.Errorf("inspect: read source versions: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var t, it string
		var r SourceRow
		if err := rows.Scan(&t, &it, &r.Version, &r.State, &r.Updated); err != nil {
			return nil, fmt.Errorf("inspect: read source versions: %w", err)
		}
		r.Found = true
		out[schema.Key(t, it)] = r
	}
	return out, rows.Err()
}
