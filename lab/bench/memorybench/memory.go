// Package memorybench is `tidemark-lab bench memory`: the Redis memory a cached
// entry costs, against a plain SET of the same payload under the same key in
// the same run. Each arm writes its keys, reads the allocator's count
// (INFO memory used_memory) before and after, samples MEMORY USAGE, and
// deletes them again before the next arm, so every arm starts from the same
// server. Hot-key replicas (N copies and the manifest in the primary hash)
// and floors (a key only invalidated, and what an invalidation adds to a
// cached entry) are measured apart.
package memorybench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/svgchart"
	"github.com/tidemark/tidemark/lab/bench"
	"github.com/tidemark/tidemark/schema"
)

// Config configures Run (`tidemark-lab bench memory`).
type Config struct {
	RedisURL string // --redis: a standalone server; "" starts a private redis-server from PATH
	Entries  int    // --entries: keys per arm
	Payloads []int  // --payloads: payload sizes in bytes, one row each
	HotKeys  int    // --hot-keys: entries given replicas in the replica arm
	Replicas int    // --replicas: copies per hot key
	Workers  int    // --workers: concurrent lookup+fill callers
	// ListpackValue, when positive, adds an arm with the server's
	// hash-max-listpack-value raised to it (restored afterwards): the
	// encoding that stores a small hash as one allocation.
	ListpackValue int
}

// DefaultConfig is 100k entries at the seed's payload (1,536 bytes) and one
// size either side of it.
func DefaultConfig() Config {
	return Config{Entries: 100_000, Payloads: []int{256, 1536, 16384}, HotKeys: 1000, Replicas: 3, Workers: 16, ListpackValue: 20_000}
}

// Validate reports every problem at once, one config.FieldError per field.
func (c Config) Validate() error {
	var p config.Problems
	for _, f := range []struct {
		field string
		n     int
	}{{"Entries", c.Entries}, {"HotKeys", c.HotKeys}, {"Replicas", c.Replicas}, {"Workers", c.Workers}} {
		if f.n <= 0 {
			p.Add(f.field, "must be positive (got %d)", f.n)
		}
	}
	if c.HotKeys > c.Entries {
		p.Add("HotKeys", "must not exceed Entries (got %d of %d)", c.HotKeys, c.Entries)
	}
	if len(c.Payloads) == 0 {
		p.Add("Payloads", "must name at least one payload size")
	}
	for _, n := range c.Payloads {
		if n <= 0 || n > 1<<20 {
			p.Add("Payloads", "each must be 1 byte to 1 MiB (got %d)", n)
		}
	}
	if c.ListpackValue < 0 {
		p.Add("ListpackValue", "must be 0 (no listpack arm) or positive (got %d)", c.ListpackValue)
	}
	return p.Err()
}

const (
	benchNamespace = "tidemark-bench"
	benchTenant    = "bench"
)

// Goal is the overhead allowed at GoalPayload bytes, against a plain SET.
const (
	Goal        = 0.30
	GoalPayload = 1536
)

// Usage is one arm's cost per key.
type Usage struct {
	Info     float64 // INFO memory used_memory delta / keys
	Sampled  float64 // mean MEMORY USAGE (SAMPLES 0) over sampled keys
	Encoding string  // OBJECT ENCODING of a sampled key
}

// Row is one payload size's arms.
type Row struct {
	Payload  int
	Set      Usage // SET key payload
	SetPX    Usage // SET key payload PX max-age: the same lifetime as an entry
	Entry    Usage // a tidemark entry (LOOKUP's lease, then FILL)
	Listpack Usage // the same entry with hash-max-listpack-value raised (zero when not measured)
	// Invalidated is what INVALIDATE of a newer version adds to a cached
	// entry (floor, gen, stale), per entry.
	Invalidated float64
	// Replicas is the extra memory per hot key for Replicas copies and the
	// manifest in the primary hash (INFO delta / hot keys).
	Replicas float64
}

// Overhead is the entry's memory over a plain SET's, as a share (0.25: 25 %).
func (r Row) Overhead() float64 { return r.Entry.Info/r.Set.Info - 1 }

// Result is Run's figures.
type Result struct {
	Config   Config // what was run
	Server   string
	Version  string
	Listpack int // the server's hash-max-listpack-value in the default arms
	Rows     []Row
	// Floor is a key that holds only a floor (an invalidation of a key no
	// reader has filled), per key.
	Floor Usage
}

// Deps is what Run is given besides its Config.
type Deps = bench.Deps

// Run measures every arm and returns the figures.
func Run(ctx context.Context, cfg Config, deps Deps) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	deps = deps.OrDefaults()
	url, stop, err := bench.PrivateRedis(cfg.RedisURL, "bench memory")
	if err != nil {
		return Result{}, err
	}
	defer stop()
	urdb, err := cache.ParseRedisURL(url)
	if err != nil {
		return Result{}, fmt.Errorf("bench memory: %w", err)
	}
	defer urdb.Close()
	rdb, ok := urdb.(*redis.Client)
	if !ok {
		return Result{}, errors.New("bench memory: needs a standalone server (INFO memory of one server is the measure)")
	}
	ccfg := cache.DefaultConfig()
	ccfg.Namespace = benchNamespace
	// Hits for the whole run, so the replica arm can copy what it filled.
	ccfg.SoftMin, ccfg.SoftMax = 25*time.Second, 25*time.Second
	c, err := cache.New(ccfg, cache.Deps{Redis: rdb, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		return Result{}, err
	}
	if err := c.LoadScripts(ctx); err != nil {
		return Result{}, err
	}
	m := &meter{rdb: rdb, c: c, cfg: cfg, maxAge: ccfg.MaxAge}
	res := Result{Config: cfg, Server: bench.RedactURL(url)}
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return Result{}, fmt.Errorf("bench memory: %w", err)
	}
	res.Version = infoField(info, "redis_version")
	if res.Listpack, err = m.listpackValue(ctx); err != nil {
		return Result{}, err
	}
	for _, size := range cfg.Payloads {
		deps.Log.Info("payload", "bytes", size, "entries", cfg.Entries)
		row, err := m.row(ctx, size, res.Listpack)
		if err != nil {
			return Result{}, fmt.Errorf("bench memory: %d-byte payload: %w", size, err)
		}
		res.Rows = append(res.Rows, row)
	}
	keys := m.keys("floor", cfg.Entries)
	if res.Floor, err = m.arm(ctx, keys, func() error { return m.invalidate(ctx, keys, 7) }); err != nil {
		return Result{}, fmt.Errorf("bench memory: floors: %w", err)
	}
	if err := m.del(ctx, keys); err != nil {
		return Result{}, err
	}
	return res, nil
}

// meter runs the arms on one server.
type meter struct {
	rdb    *redis.Client
	c      *cache.Client
	cfg    Config
	maxAge time.Duration
}

// benchKey is an item key of the bench namespace: every arm of a row uses
// the same names, so the key's own bytes are the same in each.
type benchKey struct{ item, redis string }

func (m *meter) keys(prefix string, n int) []benchKey {
	ks := make([]benchKey, n)
	for i := range ks {
		item := fmt.Sprintf("%s-%07d", prefix, i)
		ks[i] = benchKey{item: item, redis: schema.RedisKey(benchNamespace, benchTenant, item)}
	}
	return ks
}

func (m *meter) row(ctx context.Context, size, listpack int) (Row, error) {
	r := Row{Payload: size}
	payload := []byte(strings.Repeat("tidemark", size/8+1)[:size])
	keys := m.keys("item", m.cfg.Entries)
	var err error
	set := func(px time.Duration) func() error {
		return func() error {
			return m.pipelined(ctx, keys, func(p redis.Pipeliner, k benchKey) { p.Set(ctx, k.redis, payload, px) })
		}
	}
	if r.Set, err = m.arm(ctx, keys, set(0)); err != nil {
		return r, fmt.Errorf("SET: %w", err)
	}
	if err := m.del(ctx, keys); err != nil {
		return r, err
	}
	if r.SetPX, err = m.arm(ctx, keys, set(m.maxAge)); err != nil {
		return r, fmt.Errorf("SET PX: %w", err)
	}
	if err := m.del(ctx, keys); err != nil {
		return r, err
	}
	if r.Entry, err = m.arm(ctx, keys, func() error { return m.fill(ctx, keys, payload) }); err != nil {
		return r, fmt.Errorf("entries: %w", err)
	}
	inv, err := m.arm(ctx, keys, func() error { return m.invalidate(ctx, keys, 8) })
	if err != nil {
		return r, fmt.Errorf("invalidate: %w", err)
	}
	r.Invalidated = inv.Info
	if err := m.del(ctx, keys); err != nil {
		return r, err
	}
	hot := m.keys("hot", m.cfg.HotKeys)
	if err := m.fill(ctx, hot, payload); err != nil {
		return r, fmt.Errorf("hot entries: %w", err)
	}
	var copies []string
	rep, err := m.arm(ctx, hot, func() error {
		var err error
		copies, err = m.replicate(ctx, hot)
		return err
	})
	if err != nil {
		return r, fmt.Errorf("replicas: %w", err)
	}
	r.Replicas = rep.Info
	if err := m.del(ctx, hot); err != nil {
		return r, err
	}
	if err := m.delRaw(ctx, copies); err != nil {
		return r, err
	}
	if m.cfg.ListpackValue > 0 && size <= m.cfg.ListpackValue {
		if err := m.setListpack(ctx, m.cfg.ListpackValue); err != nil {
			return r, err
		}
		r.Listpack, err = m.arm(ctx, keys, func() error { return m.fill(ctx, keys, payload) })
		if err2 := m.setListpack(ctx, listpack); err == nil {
			err = err2
		}
		if err != nil {
			return r, fmt.Errorf("entries with hash-max-listpack-value %d: %w", m.cfg.ListpackValue, err)
		}
		if err := m.del(ctx, keys); err != nil {
			return r, err
		}
	}
	return r, nil
}

// arm measures what write adds: used_memory before and after, over
// len(keys), and MEMORY USAGE of up to 1,000 of them.
func (m *meter) arm(ctx context.Context, keys []benchKey, write func() error) (Usage, error) {
	before, err := m.used(ctx)
	if err != nil {
		return Usage{}, err
	}
	if err := write(); err != nil {
		return Usage{}, err
	}
	after, err := m.used(ctx)
	if err != nil {
		return Usage{}, err
	}
	u := Usage{Info: float64(after-before) / float64(len(keys))}
	step := max(1, len(keys)/1000)
	var sum, n int64
	for i := 0; i < len(keys); i += step {
		b, err := m.rdb.MemoryUsage(ctx, keys[i].redis, 0).Result()
		if errors.Is(err, redis.Nil) {
			return Usage{}, fmt.Errorf("key %s is missing: a key expired or was evicted during the arm", keys[i].redis)
		}
		if err != nil {
			return Usage{}, err
		}
		sum, n = sum+b, n+1
	}
	u.Sampled = float64(sum) / float64(n)
	if u.Encoding, err = m.rdb.ObjectEncoding(ctx, keys[0].redis).Result(); err != nil {
		return Usage{}, err
	}
	return u, nil
}

func (m *meter) used(ctx context.Context) (int64, error) {
	info, err := m.rdb.Info(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(infoField(info, "used_memory"), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("INFO memory: used_memory: %w", err)
	}
	return n, nil
}

func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

func (m *meter) listpackValue(ctx context.Context) (int, error) {
	v, err := m.rdb.ConfigGet(ctx, "hash-max-listpack-value").Result()
	if err != nil {
		return 0, fmt.Errorf("bench memory: CONFIG GET hash-max-listpack-value: %w", err)
	}
	n, err := strconv.Atoi(v["hash-max-listpack-value"])
	if err != nil {
		return 0, fmt.Errorf("bench memory: hash-max-listpack-value %q: %w", v["hash-max-listpack-value"], err)
	}
	return n, nil
}

func (m *meter) setListpack(ctx context.Context, n int) error {
	if err := m.rdb.ConfigSet(ctx, "hash-max-listpack-value", strconv.Itoa(n)).Err(); err != nil {
		return fmt.Errorf("CONFIG SET hash-max-listpack-value %d: %w", n, err)
	}
	return nil
}

func (m *meter) pipelined(ctx context.Context, keys []benchKey, add func(redis.Pipeliner, benchKey)) error {
	for i := 0; i < len(keys); i += 1000 {
		if _, err := m.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, k := range keys[i:min(i+1000, len(keys))] {
				add(p, k)
			}
			return nil
		}); err != nil {
			return err
		}
	}
	return nil
}

func (m *meter) del(ctx context.Context, keys []benchKey) error {
	return m.pipelined(ctx, keys, func(p redis.Pipeliner, k benchKey) { p.Del(ctx, k.redis) })
}

func (m *meter) delRaw(ctx context.Context, keys []string) error {
	ks := make([]benchKey, len(keys))
	for i, k := range keys {
		ks[i].redis = k
	}
	return m.del(ctx, ks)
}

// parallel runs fn on every key from cfg.Workers goroutines.
func (m *meter) parallel(ctx context.Context, keys []benchKey, fn func(benchKey) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, m.cfg.Workers)
	for w := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(keys) || ctx.Err() != nil {
					errs[w] = ctx.Err()
					return
				}
				if err := fn(keys[i]); err != nil {
					errs[w] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// fill caches every key as a reader does: LOOKUP (a miss takes the lease),
// then FILL with its token.
func (m *meter) fill(ctx context.Context, keys []benchKey, payload []byte) error {
	return m.parallel(ctx, keys, func(k benchKey) error {
		obs := time.Now()
		l, err := m.c.Lookup(ctx, benchTenant, k.item, 0)
		if err != nil {
			return err
		}
		if l.Status != cache.StatusMiss {
			return fmt.Errorf("lookup %s: %s, want a miss", k.item, l.Status)
		}
		return m.c.Fill(ctx, benchTenant, k.item, l.Token, 7, payload, obs)
	})
}

func (m *meter) invalidate(ctx context.Context, keys []benchKey, version int64) error {
	for i := 0; i < len(keys); i += 500 {
		batch := make([]cache.Invalidation, 0, 500)
		for _, k := range keys[i:min(i+500, len(keys))] {
			batch = append(batch, cache.Invalidation{Tenant: benchTenant, Item: k.item, Version: version})
		}
		out, err := m.c.InvalidateBatch(ctx, batch)
		if err != nil {
			return err
		}
		for j, o := range out {
			if o.Err != nil || o.Result != cache.InvalidateApplied {
				return fmt.Errorf("invalidate %s: %s %v, want applied", batch[j].Item, o.Result, o.Err)
			}
		}
	}
	return nil
}

// replicate builds cfg.Replicas copies of every hot key and returns the
// copies' key names.
func (m *meter) replicate(ctx context.Context, keys []benchKey) ([]string, error) {
	var mu sync.Mutex
	var copies []string
	err := m.parallel(ctx, keys, func(k benchKey) error {
		snap, err := m.c.ReplicaSource(ctx, benchTenant, k.item, 5*time.Second, time.Second)
		if err != nil {
			return err
		}
		if snap.Status != "ok" {
			return fmt.Errorf("replica source %s: %s, want ok", k.item, snap.Status)
		}
		man, err := m.c.BuildReplicas(ctx, benchTenant, k.item, snap.Entry, m.cfg.Replicas)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for i, salt := range man.Salts {
			copies = append(copies, cache.ReplicaKey(benchNamespace, benchTenant, k.item, man.Set, i, salt))
		}
		return nil
	})
	return copies, err
}

// WriteTable writes the Markdown table, the separate rows and the goal line.
func (res Result) WriteTable(out io.Writer) error {
	w, cfg := &bench.ErrWriter{W: out}, res.Config
	fmt.Fprintf(w, "server: %s (redis-server %s, hash-max-listpack-value %d); %d entries per arm; bytes per key: INFO memory used_memory delta / keys (MEMORY USAGE SAMPLES 0, mean of up to 1,000 keys)\n\n",
		res.Server, res.Version, res.Listpack, cfg.Entries)
	t := bench.Table{Header: []string{"payload", "plain SET", "SET PX (same TTL)", "tidemark entry", "over SET", "over SET PX", "encoding"}}
	if cfg.ListpackValue > 0 {
		t.Header = append(t.Header, fmt.Sprintf("entry, hash-max-listpack-value %d", cfg.ListpackValue), "over SET")
	}
	for _, r := range res.Rows {
		cells := []string{bytesOf(r.Payload), usage(r.Set), usage(r.SetPX), usage(r.Entry),
			pct(r.Overhead()), pct(r.Entry.Info/r.SetPX.Info - 1), r.Entry.Encoding}
		if cfg.ListpackValue > 0 {
			if r.Listpack.Info > 0 {
				cells = append(cells, usage(r.Listpack)+" ("+r.Listpack.Encoding+")", pct(r.Listpack.Info/r.Set.Info-1))
			} else {
				cells = append(cells, "larger than the setting", "")
			}
		}
		t.Add(cells...)
	}
	t.WriteTo(w)
	fmt.Fprintln(w)
	s := bench.Table{Header: []string{"apart from the entry", "payload", "bytes"}}
	for _, r := range res.Rows {
		s.Add(fmt.Sprintf("hot key: %d copies + manifest, per hot key (%d hot keys)", cfg.Replicas, cfg.HotKeys), bytesOf(r.Payload),
			fmt.Sprintf("%.0f (%.0f per copy, %.2fx the entry)", r.Replicas, r.Replicas/float64(cfg.Replicas), r.Replicas/float64(cfg.Replicas)/r.Entry.Info))
	}
	for _, r := range res.Rows {
		s.Add("invalidation of a cached entry (floor, gen, stale), per entry", bytesOf(r.Payload), fmt.Sprintf("%.0f", r.Invalidated))
	}
	s.Add(fmt.Sprintf("floor-only key (invalidated, never filled), per key (%s)", res.Floor.Encoding), "-", usage(res.Floor))
	s.WriteTo(w)
	for _, r := range res.Rows {
		if r.Payload == GoalPayload {
			verdict := "met"
			if r.Overhead() > Goal {
				verdict = "NOT met"
			}
			fmt.Fprintf(w, "\nGoal: entry overhead over a plain SET <= %.0f %% at %s: %s (%s)\n", Goal*100, bytesOf(GoalPayload), pct(r.Overhead()), verdict)
		}
	}
	return w.Err
}

func usage(u Usage) string { return fmt.Sprintf("%.0f (%.0f)", u.Info, u.Sampled) }

func pct(f float64) string { return fmt.Sprintf("%+.1f %%", f*100) }

func bytesOf(n int) string {
	s := strconv.Itoa(n)
	if len(s) > 3 {
		s = s[:len(s)-3] + "," + s[len(s)-3:]
	}
	return s + " B"
}

// Chart draws bytes per key of every arm, a group per payload size, noted
// with the entry's overhead over a plain SET.
func Chart(res Result) svgchart.BarChart {
	cfg := res.Config
	series := []string{"plain SET", "SET PX (same TTL)", "tidemark entry"}
	if cfg.ListpackValue > 0 {
		series = append(series, fmt.Sprintf("entry, hash-max-listpack-value %d", cfg.ListpackValue))
	}
	var groups []svgchart.BarGroup
	for _, r := range res.Rows {
		v := []float64{r.Set.Info, r.SetPX.Info, r.Entry.Info}
		if cfg.ListpackValue > 0 {
			v = append(v, r.Listpack.Info)
		}
		groups = append(groups, svgchart.BarGroup{Label: bytesOf(r.Payload) + " payload", Values: v, Note: pct(r.Overhead())})
	}
	return svgchart.BarChart{
		Title: fmt.Sprintf("tidemark-lab bench memory: Redis bytes per key, %d keys per arm (INFO memory)\n"+
			"note: entry over plain SET; goal <= %.0f %% at %s", cfg.Entries, Goal*100, bytesOf(GoalPayload)),
		YLabel: "bytes per key",
		Width:  900,
		Series: series,
		Groups: groups,
		YTick:  func(y float64) string { return strconv.FormatFloat(y, 'f', 0, 64) },
	}
}
