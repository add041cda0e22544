package e2ebench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/lab/bench"
	"github.com/tidemark/tidemark/lab/localserver"
	"github.com/tidemark/tidemark/lab/proc"
	"github.com/tidemark/tidemark/migrations"
)

// Process names in Phase.CPU and Phase.RSS.
const (
	ProcCapture   = "capture"
	ProcApply     = "apply"
	ProcBroker    = "broker"
	ProcWalsender = "walsender"
	ProcRedis     = "redis-server"
	ProcHarness   = "bench" // this process: load generator and observers
)

// Dist is a latency distribution from exact samples (nearest rank).
type Dist struct {
	N                        int
	P50, P90, P99, P999, Max time.Duration
}

func dist(s []sample) Dist {
	d := make([]time.Duration, len(s))
	for i, x := range s {
		d[i] = x.d
	}
	return distOf(d)
}

func distOf(d []time.Duration) Dist {
	slices.Sort(d)
	n := len(d)
	if n == 0 {
		return Dist{}
	}
	q := func(p float64) time.Duration { return bench.Quantile(d, p) }
	return Dist{N: n, P50: q(.50), P90: q(.90), P99: q(.99), P999: q(.999), Max: d[n-1]}
}

// Phase is one measured load of the pipeline.
type Phase struct {
	Name       string
	TxRate     float64 // target transactions/s
	RowsPerTx  int
	Load       loadResult
	Handed     Dist // commit → capture handed it to its producer (record timestamp, 1 ms resolution)
	Produced   Dist // commit → read back from Kafka
	Applied    Dist // commit → the applier's write in Redis
	WindowP99  []time.Duration
	Unapplied  int  // changes not applied when the drain ended
	Bounded    bool // everything applied, and the last window's p99 within 1.5x the first's (+20 ms)
	CPU        map[string]time.Duration
	RSS        map[string]int64
	Walsenders int     // distinct walsender pids seen (1 unless capture reconnected)
	BoxBusy    float64 // cores the whole machine kept busy during the load, on average
	// Snapshots is how many visibility snapshots capture took from the
	// load's start to the drain's end (SnapshotsKnown false: the capture
	// build has no such metric).
	Snapshots      float64
	SnapshotsKnown bool
}

// SnapshotsPerTx is capture's visibility snapshot queries per committed
// transaction of the load.
func (p Phase) SnapshotsPerTx() (float64, bool) {
	if !p.SnapshotsKnown || p.Load.Commits == 0 {
		return 0, false
	}
	return p.Snapshots / float64(p.Load.Commits), true
}

// ChangeRate is the committed changes/s achieved.
func (p Phase) ChangeRate() float64 { return float64(p.Load.Changes) / p.Load.Elapsed.Seconds() }

// CPUPer1k is process name's CPU seconds per 1,000 changes.
func (p Phase) CPUPer1k(name string) (float64, bool) {
	c, ok := p.CPU[name]
	if !ok || p.Load.Changes == 0 {
		return 0, false
	}
	return c.Seconds() * 1000 / float64(p.Load.Changes), true
}

// Result is a whole run.
type Result struct {
	Config              Config // what was run
	Ceiling             Dist   // pg_recvlogical commit → received
	CeilingLoad         loadResult
	CeilingWalsenderCPU time.Duration
	CeilingBoxBusy      float64        // cores the whole machine kept busy during the ceiling's load
	Debezium            *DebeziumPhase // nil unless Config.Debezium
	Phases              []Phase
}

// warmKeys is the rows of a warm-up's tenant.
const warmKeys = 1000

// Deps is what Run is given besides its Config.
type Deps = bench.Deps

// Run measures the ceiling, starts the stage processes and runs the phases.
func Run(ctx context.Context, cfg Config, deps Deps) (Result, error) {
	var res Result
	log := deps.OrDefaults().Log
	if err := cfg.Validate(); err != nil {
		return res, err
	}
	if cfg.Recvlogical == "" {
		p, err := findRecvlogical()
		if err != nil {
			return res, err
		}
		cfg.Recvlogical = p
	}
	var java string
	if cfg.Debezium {
		j, err := checkDebezium(cfg.DebeziumJar)
		if err != nil {
			return res, err
		}
		java = j
	}
	res.Config = cfg
	dir := cfg.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "tidemark-bench-e2e-")
		if err != nil {
			return res, err
		}
		defer os.RemoveAll(d)
		// Postgres runs as its own user when we are root: it must reach its dir.
		if err := os.Chmod(d, 0o755); err != nil {
			return res, err
		}
		dir = d
	}
	pg, err := localserver.NewPostgres(localserver.PostgresConfig{Dir: filepath.Join(dir, "postgres"),
		Conf: map[string]string{"synchronous_commit": "on", "max_wal_size": "'4GB'", "checkpoint_timeout": "'15min'"}})
	if err != nil {
		return res, err
	}
	defer pg.Remove()
	rs, err := localserver.NewRedis(localserver.RedisConfig{Dir: filepath.Join(dir, "redis")})
	if err != nil {
		return res, err
	}
	defer rs.Remove()
	dsn := pg.DSN("postgres")
	if _, err := migrations.Up(ctx, dsn, log); err != nil {
		return res, err
	}
	pcfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return res, err
	}
	pcfg.MaxConns = int32(cfg.Workers + 4)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return res, fmt.Errorf("bench e2e: connect: %w", err)
	}
	defer pool.Close()
	log.Info("seeding rows", "per_phase", cfg.Keys)
	tenants := map[string]int{"ceiling": cfg.Keys, "warmup": warmKeys, "tx": cfg.Keys, "changes": cfg.Keys}
	if cfg.Debezium {
		tenants[debeziumTenant], tenants[debeziumWarmTenant] = cfg.Keys, warmKeys
	}
	for t, n := range tenants {
		if err := seedTenant(ctx, pool, t, n); err != nil {
			return res, err
		}
	}

	// The ceiling, alone on the box: pg_recvlogical under the first phase's load.
	log.Info("ceiling: pg_recvlogical under single-row load", "tx_per_s", cfg.TxRate, "duration", cfg.Duration)
	recv, err := startRecvlogical(ctx, cfg.Recvlogical, dsn, "e2e_ceiling")
	if err != nil {
		return res, err
	}
	wpid, err := slotPID(ctx, pool, "e2e_ceiling", 30*time.Second)
	if err != nil {
		recv.stop()
		return res, err
	}
	m, err := newMeter(map[string]int{ProcWalsender: wpid})
	if err != nil {
		recv.stop()
		return res, err
	}
	recv.record(true)
	pgbench := findPgbench(cfg.Recvlogical)
	log.Info("load generator", "pgbench", pgbench)
	l := &load{pool: pool, tenant: "ceiling", keys: cfg.Keys, rows: 1, txRate: float64(cfg.TxRate), workers: cfg.Workers, pgbench: pgbench, dsn: dsn}
	b0, t0, err := boxCPU()
	if err != nil {
		recv.stop()
		return res, err
	}
	res.CeilingLoad, err = l.run(ctx, cfg.Duration)
	if err != nil {
		recv.stop()
		return res, err
	}
	if b1, t1, err := boxCPU(); err == nil && t1 > t0 {
		res.CeilingBoxBusy = float64(b1-b0) / float64(t1-t0) * float64(runtime.NumCPU())
	}
	for deadline := time.Now().Add(cfg.Drain); ; time.Sleep(20 * time.Millisecond) {
		n, err := recv.count()
		if err != nil {
			recv.stop()
			return res, err
		}
		if int64(n) >= res.CeilingLoad.Commits || time.Now().After(deadline) {
			break
		}
	}
	cpu, _, err := m.usage()
	samples := recv.stop()
	if err != nil {
		return res, err
	}
	res.Ceiling, res.CeilingWalsenderCPU = dist(samples), cpu[ProcWalsender]
	// pg_recvlogical has exited, but its walsender may still hold the slot
	// for a moment on a loaded box: drop it once it is released.
	if err := dropSlot(ctx, pool, "e2e_ceiling"); err != nil {
		return res, err
	}

	// Debezium's embedded engine under the same load, alone on the box too.
	if cfg.Debezium {
		d := debeziumRun{cfg: cfg, java: java, dir: dir, pgPort: pg.Port, pool: pool, pgbench: pgbench, dsn: dsn, log: log}
		ph, err := d.run(ctx)
		if err != nil {
			return res, err
		}
		res.Debezium = &ph
	}

	st, err := startStages(ctx, cfg, dir, dsn, rs.URL(), log)
	defer st.stop()
	if err != nil {
		return res, err
	}
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr})
	defer rdb.Close()
	cc, err := cache.New(cache.DefaultConfig(), cache.Deps{Redis: rdb, Log: log, Registerer: prometheus.NewRegistry()})
	if err != nil {
		return res, err
	}
	obs := newObserver(cache.DefaultConfig().Namespace, cfg.ObserveEvery)
	octx, stopObs := context.WithCancel(ctx)
	g, gctx := errgroup.WithContext(octx)
	ready := make(chan struct{})
	g.Go(func() error { return obs.consume(gctx, st.brokers, st.topic) })
	g.Go(func() error { return obs.subscribe(gctx, rdb, ready) })
	defer func() { stopObs(); _ = g.Wait() }() // stopped here: their error is context.Canceled
	select {
	case <-ready:
	case <-gctx.Done():
		return res, g.Wait()
	}
	walsender, err := slotPID(ctx, pool, st.slot, 30*time.Second)
	if err != nil {
		return res, err
	}
	pids := map[string]int{ProcCapture: st.capture.Pid(), ProcApply: st.apply.Pid(), ProcWalsender: walsender,
		ProcRedis: rs.Pid(), ProcHarness: os.Getpid()}
	if st.broker != nil {
		pids[ProcBroker] = st.broker.Pid()
	}
	r := runner{cfg: cfg, pool: pool, cache: cc, obs: obs, st: st, pids: pids, log: log, pgbench: pgbench, dsn: dsn}

	// Warm-up: the applier joins its group and every path is exercised once.
	if _, err := r.phase(ctx, "warmup", "warmup", warmKeys, 200, 1, 3*time.Second, time.Minute); err != nil {
		return res, fmt.Errorf("bench e2e: warm-up: %w", err)
	}
	for _, ph := range []struct {
		name, tenant string
		rate         float64
		rows         int
	}{
		{fmt.Sprintf("%d single-row tx/s", cfg.TxRate), "tx", float64(cfg.TxRate), 1},
		{fmt.Sprintf("%d changes/s (%d-row tx)", cfg.ChangeRate, cfg.RowsPerTx), "changes", float64(cfg.ChangeRate) / float64(cfg.RowsPerTx), cfg.RowsPerTx},
	} {
		p, err := r.phase(ctx, ph.name, ph.tenant, cfg.Keys, ph.rate, ph.rows, cfg.Duration, cfg.Drain)
		if err != nil {
			return res, err
		}
		res.Phases = append(res.Phases, p)
	}
	return res, nil
}

// slotPID waits for slot to be streamed and returns its walsender's pid.
func slotPID(ctx context.Context, pool *pgxpool.Pool, slot string, within time.Duration) (int, error) {
	deadline := time.Now().Add(within)
	for {
		var pid *int32
		err := pool.QueryRow(ctx, "SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&pid)
		if err == nil && pid != nil {
			return int(*pid), nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("bench e2e: nothing streams slot %s after %s (last error: %v)", slot, within, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stages are the pipeline's processes.
type stages struct {
	brokers                []string
	topic, group, slot     string
	broker, capture, apply *proc.Process
	captureMetrics         string // capture's --metrics-addr
}

func (s *stages) stop() {
	// Upstream last, so each stage can flush into the next on its way out.
	for _, p := range []*proc.Process{s.apply, s.capture, s.broker} {
		if p != nil {
			p.Stop(stopGrace)
		}
	}
}

func startStages(ctx context.Context, cfg Config, dir, dsn, redisURL string, log *slog.Logger) (*stages, error) {
	suffix := strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	st := &stages{brokers: cfg.Brokers, topic: "tidemark.e2e." + suffix, group: "tidemark-e2e-" + suffix, slot: "tidemark_e2e_" + suffix}
	if len(st.brokers) == 0 {
		port, err := localserver.FreePort()
		if err != nil {
			return st, err
		}
		args := []string{"kafka", "--data-dir", filepath.Join(dir, "kafka"), "--port", strconv.Itoa(port),
			"--partitions", strconv.Itoa(cfg.Partitions)}
		if cfg.SyncWrites {
			args = append(args, "--sync-writes")
		}
		if st.broker, err = startProc(dir, "broker", diag{cfg.Profile, cfg.Trace}, cfg.LabBinary, args...); err != nil {
			return st, err
		}
		addr := "127.0.0.1:" + strconv.Itoa(port)
		st.brokers = []string{addr}
		if err := waitFor(30*time.Second, "tidemark-lab kafka listens", st.broker, func() error {
			c, err := net.Dial("tcp", addr)
			if err == nil {
				c.Close()
			}
			return err
		}); err != nil {
			return st, err
		}
	}
	kafka := strings.Join(st.brokers, ",")
	log.Info("starting capture and apply", "kafka", kafka, "topic", st.topic)
	mport, err := localserver.FreePort()
	if err != nil {
		return st, err
	}
	st.captureMetrics = "127.0.0.1:" + strconv.Itoa(mport)
	captureArgs := append([]string{"capture", "--pg", dsn, "--kafka", kafka, "--topic", st.topic,
		"--partitions", strconv.Itoa(cfg.Partitions), "--slot", st.slot, "--metrics-addr", st.captureMetrics}, cfg.CaptureArgs...)
	if st.capture, err = startProc(dir, "capture", diag{cfg.Profile, cfg.Trace}, cfg.Binary, captureArgs...); err != nil {
		return st, err
	}
	applyArgs := append([]string{"apply", "--kafka", kafka, "--redis", redisURL, "--topic", st.topic,
		"--group", st.group, "--metrics-addr="}, cfg.ApplyArgs...)
	if st.apply, err = startProc(dir, "apply", diag{cfg.Profile, cfg.Trace}, cfg.Binary, applyArgs...); err != nil {
		return st, err
	}
	adm, err := kgo.NewClient(kgo.SeedBrokers(st.brokers...))
	if err != nil {
		return st, err
	}
	defer adm.Close()
	err = waitFor(time.Minute, "capture creates the topic", st.capture, func() error {
		tds, err := kadm.NewClient(adm).ListTopics(ctx, st.topic)
		if err != nil {
			return err
		}
		if !tds.Has(st.topic) {
			return errors.New("no topic yet")
		}
		return st.apply.ExitErr()
	})
	return st, err
}

// waitFor polls cond until it holds, p exits, or within passes.
func waitFor(within time.Duration, what string, p *proc.Process, cond func() error) error {
	deadline := time.Now().Add(within)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if e := p.ExitErr(); e != nil {
			return e
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench e2e: %s: not within %s: %v", what, within, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// runner runs phases against the started stages.
type runner struct {
	cfg   Config
	pool  *pgxpool.Pool
	cache *cache.Client
	obs   *observer
	st    *stages
	pids  map[string]int
	log   *slog.Logger
	// pgbench (its path; "": the pgx generator) and the DSN it connects to
	pgbench, dsn string
}

// prefill caches every row of tenant (version 1), so each change invalidates
// a cached value, the production case.
func (r *runner) prefill(ctx context.Context, tenant string, keys int) error {
	g, gctx := errgroup.WithContext(ctx)
	next := make(chan int)
	g.Go(func() error {
		defer close(next)
		for i := range keys {
			select {
			case next <- i:
			case <-gctx.Done():
				return gctx.Err()
			}
		}
		return nil
	})
	for range 16 {
		g.Go(func() error {
			for i := range next {
				lr, err := r.cache.Lookup(gctx, tenant, itemID(i), 0)
				if err != nil {
					return err
				}
				if lr.Token.IsZero() {
					continue
				}
				if err := r.cache.Fill(gctx, tenant, itemID(i), lr.Token, 1, []byte(`{}`), time.Now()); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("bench e2e: prefill %s: %w", tenant, err)
	}
	return nil
}

func (r *runner) phase(ctx context.Context, name, tenant string, keys int, txRate float64, rows int, d, drain time.Duration) (Phase, error) {
	p := Phase{Name: name, TxRate: txRate, RowsPerTx: rows}
	r.log.Info("phase", "name", name, "duration", d)
	if err := r.prefill(ctx, tenant, keys); err != nil {
		return p, err
	}
	r.obs.begin(tenant)
	m, err := newMeter(r.pids)
	if err != nil {
		return p, err
	}
	l := &load{pool: r.pool, tenant: tenant, keys: keys, rows: rows, txRate: txRate, workers: r.cfg.Workers, every: r.cfg.ObserveEvery,
		pgbench: r.pgbench, dsn: r.dsn}
	snap0, snapOK, err := snapshotsTaken(ctx, r.st.captureMetrics)
	if err != nil {
		return p, err
	}
	b0, t0, err := boxCPU()
	if err != nil {
		return p, err
	}
	if p.Load, err = l.run(ctx, d); err != nil {
		return p, err
	}
	b1, t1, err := boxCPU()
	if err != nil {
		return p, err
	}
	if t1 > t0 {
		p.BoxBusy = float64(b1-b0) / float64(t1-t0) * float64(runtime.NumCPU())
	}
	for deadline := time.Now().Add(drain); ; time.Sleep(20 * time.Millisecond) {
		np, na, err := r.obs.counts()
		if err != nil {
			return p, err
		}
		for _, pr := range []*proc.Process{r.st.capture, r.st.apply, r.st.broker} {
			if pr != nil {
				if err := pr.ExitErr(); err != nil {
					return p, err
				}
			}
		}
		if (int64(np) >= p.Load.Observed && int64(na) >= p.Load.Observed) || time.Now().After(deadline) {
			break
		}
	}
	np, na, _ := r.obs.counts()
	r.log.Info("phase done", "name", name, "commits", p.Load.Commits, "changes", p.Load.Changes, "observed", p.Load.Observed, "produced", np, "applied", na,
		"late_tx", p.Load.Late, "load_elapsed", p.Load.Elapsed)
	if p.CPU, p.RSS, err = m.usage(); err != nil {
		return p, err
	}
	snap1, snapOK1, err := snapshotsTaken(ctx, r.st.captureMetrics)
	if err != nil {
		return p, err
	}
	p.Snapshots, p.SnapshotsKnown = snap1-snap0, snapOK && snapOK1
	p.CPU[ProcHarness] += p.Load.CPU // pgbench, a child of the bench
	handed, produced, applied := r.obs.end()
	p.Handed, p.Produced, p.Applied = dist(handed), dist(produced), dist(applied)
	p.Unapplied = int(p.Load.Observed) - len(applied)
	p.WindowP99 = windows(applied, p.Load.Elapsed)
	p.Bounded = p.Unapplied == 0 && bounded(p.WindowP99)
	return p, nil
}

// windows is the p99 of the samples committed in each full windowSpan from the
// first, a span being full when the load lasted through its end. Judging
// fullness by the load, not by whether a later sample exists, keeps the
// last full window in: it is where a pipeline falling behind shows most.
func windows(s []sample, load time.Duration) []time.Duration {
	const span = windowSpan
	if len(s) == 0 {
		return nil
	}
	first := s[0].commit
	for _, x := range s {
		if x.commit.Before(first) {
			first = x.commit
		}
	}
	full := max(1, int(load/span))
	byWin := make([][]time.Duration, full)
	for _, x := range s {
		if i := int(x.commit.Sub(first) / span); i < full {
			byWin[i] = append(byWin[i], x.d)
		}
	}
	out := make([]time.Duration, 0, full)
	for _, w := range byWin {
		if len(w) == 0 {
			out = append(out, noSamples) // shown as such, not dropped: the load committed nothing timed then
			continue
		}
		out = append(out, distOf(w).P99)
	}
	return out
}

// windowSpan is the length of the windows the lag is judged by (the
// report's "p99 per 10 s window").
const windowSpan = 10 * time.Second

// noSamples is the p99 of a window no timed commit fell in.
const noSamples = time.Duration(-1)

// bounded: the last window's p99 is within 1.5x the first's plus 20 ms of
// noise. A pipeline that cannot keep up falls further behind every second,
// so its tail rises from window to window.
// Windows without samples are skipped: they say nothing of the lag.
func bounded(w []time.Duration) bool {
	w = slices.DeleteFunc(slices.Clone(w), func(d time.Duration) bool { return d == noSamples })
	if len(w) == 0 {
		return false
	}
	return w[len(w)-1] <= w[0]*3/2+20*time.Millisecond
}
