// Package chaos is `tidemark-lab chaos`: it runs the whole pipeline as separate
// processes on private servers, drives writers and readers against it,
// injects faults on a seeded schedule, and checks the freshness promise on
// every answer from two histories only — the API answers with their send
// and arrival times, and the source's commits with their exact commit times
// (a trigger-fed table read with track_commit_timestamp). It does not ask the
// cache, api or applier code anything: a bug there cannot hide itself.
//
// Files: config.go (what to run), system.go (servers and stage processes),
// supervisor.go (one process), load.go (writers and readers), history.go and
// recorder.go (the two histories), checker.go (the property), schedule.go and
// faults.go (what goes wrong and when), observe.go (watermark age, source
// reads, commit-to-apply), report.go (the verdict and figures).
package chaos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tidemark/tidemark/internal/lifecycle"
)

// Deps of a run.
type Deps struct {
	Log *slog.Logger
}

// Runner runs one chaos run.
type Runner struct {
	cfg Config
	log *slog.Logger
}

// New validates the config.
func New(cfg Config, deps Deps) (*Runner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	return &Runner{cfg: cfg, log: deps.Log}, nil
}

// drainWithin bounds the wait, after the load stops, for the source history
// to cover every answer.
const drainWithin = time.Minute

// Run starts the system, runs load and faults for the configured duration,
// judges every answer and returns the report. An error means the run could
// not be carried out (a server would not start), not that it found
// violations: see Report.Pass.
func (r *Runner) Run(ctx context.Context) (*Report, error) {
	cfg := r.cfg
	dir := cfg.Dir
	removeDir := false
	if dir == "" && cfg.Keep != "" {
		dir = filepath.Join(cfg.Keep, "work")
	}
	if dir == "" {
		d, err := os.MkdirTemp("", "tidemark-chaos-")
		if err != nil {
			return nil, fmt.Errorf("chaos: work dir: %w", err)
		}
		dir, removeDir = d, true
	}
	// Postgres runs as its own user when we are root: it must reach its dir.
	if err := os.MkdirAll(dir, 0o755); err != nil || os.Chmod(dir, 0o755) != nil {
		return nil, fmt.Errorf("chaos: work dir %s: not usable: %v", dir, err)
	}
	sys, err := startSystem(ctx, cfg, dir, r.log)
	if err != nil {
		if removeDir {
			os.RemoveAll(dir)
		}
		return nil, err
	}
	defer func() {
		sys.close()
		for _, d := range []string{"postgres", "postgres-b", "redis0", "redis1", "redis2", "kafka"} {
			os.RemoveAll(filepath.Join(dir, d)) // data; the process logs stay with --keep
		}
		if removeDir {
			os.RemoveAll(dir)
		}
	}()
	pool, err := pgxpool.New(ctx, sys.dsn+"&pool_max_conns=2")
	if err != nil {
		return nil, fmt.Errorf("chaos: history pool: %w", err)
	}
	defer pool.Close()
	rec, err := newRecorder(cfg.Bound, pool, cfg.Keep)
	if err != nil {
		return nil, err
	}
	defer rec.close()
	if err := rec.load(ctx); err != nil {
		return nil, err
	}

	rep := &Report{Seed: cfg.Seed, Duration: Duration(cfg.Duration), Cluster: cfg.Cluster, Kafka: "embedded broker process",
		RateUpdates: cfg.RateUpdates, RateReads: cfg.RateReads, Bound: Duration(cfg.Bound)}
	if len(cfg.Kafka) > 0 {
		rep.Kafka = sys.brokers
	}
	if cfg.Keep != "" {
		rep.Logs = cfg.Keep
	}
	start := time.Now()
	r.log.Info("chaos: running", "duration", cfg.Duration, "seed", cfg.Seed, "faults", len(cfg.Kinds()), "dir", dir)

	bg, stopBG := context.WithCancel(ctx)
	defer stopBG()
	var bgWG sync.WaitGroup
	// The source's count of its reads has a connection of its own, so a
	// sample is never queued behind the writers.
	srcPool, err := pgxpool.New(ctx, sys.dsn+"&pool_max_conns=1")
	if err != nil {
		return nil, fmt.Errorf("chaos: source counter pool: %w", err)
	}
	defer srcPool.Close()
	obs := newObserver(sys, newSourceCounter(srcPool))
	restarts := map[string]int{}
	var restartsMu sync.Mutex
	bgWG.Add(3)
	go func() { defer bgWG.Done(); obs.run(bg) }()
	go func() { defer bgWG.Done(); r.judgeLoop(bg, rec) }()
	go func() {
		defer bgWG.Done()
		r.watchdog(bg, sys, func(name string) { restartsMu.Lock(); restarts[name]++; restartsMu.Unlock() })
	}()

	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	ld := newLoad(sys, rec, cfg)
	loadDone := make(chan struct{})
	go func() { ld.run(loadCtx); close(loadDone) }()

	faultCtx, stopFaults := context.WithTimeout(ctx, cfg.Duration)
	defer stopFaults()
	in := newInjector(sys, ld, cfg.Seed)
	var up *upgrader
	if cfg.upgrading() {
		up = newUpgrader(sys, in, r.log, start)
		defer up.close()
		go up.run(faultCtx, cfg.Duration)
	}
	var (
		fmu    sync.Mutex
		faults []FaultRecord
		fwg    sync.WaitGroup
	)
	for _, f := range cfg.plan() {
		fwg.Add(1)
		go func() {
			defer fwg.Done()
			select {
			case <-faultCtx.Done():
				return
			case <-time.After(time.Until(start.Add(f.At))):
			}
			r.log.Info("chaos: fault", "kind", f.Kind, "hold", f.Hold)
			fr := in.inject(faultCtx, f)
			if fr.Error != "" {
				r.log.Warn("chaos: fault did not go as planned", "kind", f.Kind, "err", fr.Error)
			}
			fmu.Lock()
			faults = append(faults, fr)
			fmu.Unlock()
		}()
	}
	<-faultCtx.Done()
	fwg.Wait()
	if up != nil {
		var steps []FaultRecord
		rep.Upgrade, steps = up.wait()
		faults = append(faults, steps...)
	}
	stopLoad()
	<-loadDone
	end := time.Now()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	stopBG()
	bgWG.Wait()

	// Judge what is left once the history covers it.
	deadline := time.Now().Add(drainWithin)
	for rec.pendingCount() > 0 {
		if err := rec.load(ctx); err != nil {
			r.log.Warn("chaos: load history", "err", err)
		}
		rec.judge()
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("chaos: the source history did not cover %d answers within %s", rec.pendingCount(), drainWithin)
		}
		if rec.pendingCount() > 0 {
			time.Sleep(500 * time.Millisecond)
		}
	}
	if err := pool.QueryRow(ctx, `SELECT count(DISTINCT xid), count(*) FROM chaos.history
		WHERE pg_xact_commit_timestamp(xmin) >= $1`, start).Scan(&rep.Commits, &rep.Events); err != nil {
		return nil, fmt.Errorf("chaos: count commits: %w", err)
	}
	rep.RolledBack, rep.Patches, rep.Creates, rep.WriteErrors = ld.rolledBack.Load(), ld.patches.Load(), ld.creates.Load(), ld.writeErrors.Load()

	sortFaults(faults)
	samples := obs.all()
	ws := recoveries(faults, samples, end)
	rep.Faults, rep.Recovery = faults, recoveryStats(faults)
	rep.summarise(&rec.stats, samples, obs.bounds, ws, start, end)
	rep.judgeBudget(cfg.Limits(), obs.sourceSeconds(), faults, start, end)
	rep.judgeSLO(sloInput{Reads: rec.reads, Samples: samples, LatBounds: obs.latBounds, Faults: faults, Start: start, End: end,
		Keys: &rec.keys, Source: obs.sourceSeconds(), Foreground: cfg.SourceBudget,
		Target: ReadSLO, Judged: cfg.Schedule == ScheduleSparse})
	if len(restarts) > 0 {
		rep.Restarts = restarts
	}
	if rep.Checked == 0 {
		return rep, errors.New("chaos: no answer was checked: the run proves nothing")
	}
	return rep, nil
}

func sortFaults(fs []FaultRecord) {
	for i := 1; i < len(fs); i++ {
		for j := i; j > 0 && fs[j].Injected.Before(fs[j-1].Injected); j-- {
			fs[j], fs[j-1] = fs[j-1], fs[j]
		}
	}
}

// judgeLoop loads the source history and judges the answers it covers, once
// a second; a failed load (Postgres restarting) is retried on the next tick.
func (r *Runner) judgeLoop(ctx context.Context, rec *recorder) {
	n := 0
	lifecycle.Every(ctx, time.Second, func() {
		if err := rec.load(ctx); err != nil {
			if ctx.Err() == nil {
				r.log.Debug("chaos: load history", "err", err)
			}
			return
		}
		rec.judge()
		if n++; n%30 == 0 {
			rec.prune()
		}
		if n%60 == 0 {
			st := &rec.stats
			r.log.Info("chaos: progress", "answers", st.Answers, "checked", st.Checked, "violations", st.Violations,
				"worst_age", st.WorstAge.Round(time.Millisecond), "commits_known", rec.src.Len())
		}
	})
}

// watchdog restarts a stage (or the embedded broker) that exited by itself,
// as an operator's supervisor would, and counts it.
func (r *Runner) watchdog(ctx context.Context, sys *system, restarted func(string)) {
	lifecycle.Every(ctx, time.Second, func() {
		ps := sys.stages()
		if sys.broker != nil {
			ps = append(ps, sys.broker)
		}
		for _, p := range ps {
			if ok, err := p.RestartIfExited(); ok {
				r.log.Warn("chaos: a stage exited by itself; restarted", "stage", p.Name(), "err", err, "log", p.Config().Log)
				restarted(p.Name())
			}
		}
	})
}
