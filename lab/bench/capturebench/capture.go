// Package capturebench is `tidemark-lab bench capture`: capture-to-Kafka rate against
// pg_recvlogical draining the same WAL with the same publication, and
// commit-to-produced latency at a steady rate.
package capturebench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/tidemark/tidemark/capture"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/lab/bench"
	"github.com/tidemark/tidemark/lab/localserver"
	"github.com/tidemark/tidemark/lab/seed"
	"github.com/tidemark/tidemark/migrations"
)

// Config configures Run (`tidemark-lab bench capture`).
type Config struct {
	PG          string        // a database tidemark may migrate and write to; "" starts a private Postgres
	Rows        int           // row changes in the fixed WAL workload
	Recvlogical string        // pg_recvlogical path ("" = find it)
	Rate        int           // changes/s of the steady latency phase
	Duration    time.Duration // length of the latency phase
	Partitions  int
	Rounds      int // drains of each kind, alternating; the median is reported
}

// DefaultConfig is `tidemark-lab bench capture` with no flags.
func DefaultConfig() Config {
	return Config{Rows: 500_000, Rate: 2000, Duration: 10 * time.Second, Partitions: 12, Rounds: 3}
}

// Validate reports every problem at once, one config.FieldError per field.
// PG may be empty: Run then starts a private Postgres.
func (c Config) Validate() error {
	var p config.Problems
	if c.Rows < 1000 {
		p.Add("Rows", "must be at least 1000 (got %d)", c.Rows)
	}
	if c.Rate < 1 {
		p.Add("Rate", "must be positive (got %d)", c.Rate)
	}
	if c.Duration < time.Second {
		p.Add("Duration", "must be at least 1s (got %s)", c.Duration)
	}
	if c.Partitions < 1 {
		p.Add("Partitions", "must be at least 1 (got %d)", c.Partitions)
	}
	if c.Rounds < 1 {
		p.Add("Rounds", "must be at least 1 (got %d)", c.Rounds)
	}
	return p.Err()
}

// Result is what Run measured.
type Result struct {
	Config             Config // what was run
	GOMAXPROCS         int    // of the process that ran it
	Rows               int
	RecvlogicalElapsed time.Duration // median over the rounds
	CaptureElapsed     time.Duration // median over the rounds
	RecvlogicalRounds  []time.Duration
	CaptureRounds      []time.Duration
	LatencySamples     int
	P50, P99, Max      time.Duration
}

// RecvlogicalRate is pg_recvlogical's decode rate (row changes/s).
func (r Result) RecvlogicalRate() float64 {
	return float64(r.Rows) / r.RecvlogicalElapsed.Seconds()
}

// CaptureRate is capture-to-Kafka's rate (row changes acked/s).
func (r Result) CaptureRate() float64 { return float64(r.Rows) / r.CaptureElapsed.Seconds() }

// findRecvlogical finds pg_recvlogical beside the newest installed server
// (lab/localserver's rule), or on PATH.
func findRecvlogical() (string, error) {
	if dir, err := localserver.PostgresBinDir(); err == nil {
		if p := filepath.Join(dir, "pg_recvlogical"); fileExists(p) {
			return p, nil
		}
	}
	if p, err := exec.LookPath("pg_recvlogical"); err == nil {
		return p, nil
	}
	return "", errors.New("pg_recvlogical not found in /usr/lib/postgresql/*/bin or PATH: apt-get install -y postgresql-client-15")
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// startPostgres starts a throwaway private server for a run without PG
// (fsync off, room for the benchmark's slots and WAL); stop removes it.
func startPostgres() (dsn string, stop func(), err error) {
	dir, err := os.MkdirTemp("", "tidemark-bench-pg-")
	if err != nil {
		return "", nil, err
	}
	pg, err := localserver.NewPostgres(localserver.PostgresConfig{Dir: dir, Ephemeral: true, Conf: map[string]string{
		"max_wal_senders": "10", "max_replication_slots": "10", "shared_buffers": "'256MB'", "max_wal_size": "'4GB'",
	}})
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("bench capture: private postgres: %w", err)
	}
	return pg.DSN("postgres"), pg.Remove, nil
}

// Deps is what Run is given besides its Config.
type Deps = bench.Deps

// Run writes a fixed WAL workload once, drains it with pg_recvlogical
// (pgoutput, same publication) and with capture into an in-process kfake
// from two slots created before the workload (so both read the same WAL),
// then measures commit-to-produced latency at a steady rate.
func Run(ctx context.Context, cfg Config, deps Deps) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	if cfg.PG == "" {
		dsn, stop, err := startPostgres()
		if err != nil {
			return Result{}, err
		}
		defer stop()
		cfg.PG = dsn
	}
	log := deps.OrDefaults().Log
	res := Result{Config: cfg, GOMAXPROCS: runtime.GOMAXPROCS(0), Rows: cfg.Rows}
	if cfg.Recvlogical == "" {
		p, err := findRecvlogical()
		if err != nil {
			return res, err
		}
		cfg.Recvlogical = p
	}
	if _, err := migrations.Up(ctx, cfg.PG, log); err != nil {
		return res, err
	}
	conn, err := pgx.Connect(ctx, cfg.PG)
	if err != nil {
		return res, fmt.Errorf("bench capture: connect: %w", err)
	}
	defer conn.Close(context.Background())
	suffix := fmt.Sprintf("%d", time.Now().UnixNano()%1e9)
	rounds := max(1, cfg.Rounds)
	var recvSlots, capSlots []string
	for i := range rounds {
		recvSlots = append(recvSlots, fmt.Sprintf("bench_recv_%s_%d", suffix, i))
		capSlots = append(capSlots, fmt.Sprintf("bench_cap_%s_%d", suffix, i))
	}
	// Every slot exists before the workload, so every drain reads the same WAL.
	for _, s := range append(slices.Clone(recvSlots), capSlots...) {
		if _, err := conn.Exec(ctx, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", s); err != nil {
			return res, fmt.Errorf("bench capture: create slot: %w", err)
		}
		defer func() {
			_, _ = conn.Exec(context.Background(), "SELECT pg_drop_replication_slot($1) FROM pg_replication_slots WHERE slot_name = $1", s)
		}() // best effort: the private server is removed after the run
	}
	tenant := "bench" + suffix
	log.Info("writing the WAL workload", "rows", cfg.Rows)
	if err := (seed.Items{Tenant: tenant, Prefix: "i", Count: cfg.Rows, Batch: 1000}).Insert(ctx, conn); err != nil {
		return res, fmt.Errorf("bench capture: workload: %w", err)
	}
	var endS string
	if err := conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&endS); err != nil {
		return res, err
	}

	var (
		mu        sync.Mutex
		recording bool
		samples   []time.Duration
	)
	var acked atomic.Int64 // changes acked in this round (no Gather in the hot loop)
	observe := func(d time.Duration) {
		acked.Add(1)
		mu.Lock()
		if recording {
			samples = append(samples, d)
		}
		mu.Unlock()
	}
	// The running round's capture and its kfake: stopped in that order
	// (capture flushes into kfake on its way out).
	var (
		stopCapture context.CancelFunc = func() {}
		closeKafka                     = func() {}
		runErr      chan error
	)
	cancel := func() (err error) {
		stopCapture()
		if runErr != nil {
			err = <-runErr
			runErr = nil
		}
		closeKafka()
		return err
	}
	defer func() { _ = cancel() }() // the round's own cancel reports capture's error
	// Rounds alternate, so a neighbour's load on a shared box hits both kinds.
	for i := range rounds {
		log.Info("draining with pg_recvlogical", "round", i+1, "path", cfg.Recvlogical)
		began := time.Now()
		cmd := exec.CommandContext(ctx, cfg.Recvlogical, "-d", cfg.PG, "--slot", recvSlots[i], "--start", "--no-loop",
			"--endpos", endS, "-o", "proto_version=1", "-o", "publication_names=tidemark", "-o", "messages=true", "-f", os.DevNull)
		if out, err := cmd.CombinedOutput(); err != nil {
			return res, fmt.Errorf("bench capture: pg_recvlogical: %v: %s", err, out)
		}
		res.RecvlogicalRounds = append(res.RecvlogicalRounds, time.Since(began))

		// Only the last round's capture stays up for the latency phase.
		if err := cancel(); err != nil {
			return res, err
		}
		// A fresh kfake per round: it keeps every record in this process's
		// heap, and a growing heap would tax later rounds' GC.
		k, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			return res, fmt.Errorf("bench capture: kfake: %w", err)
		}
		closeKafka = k.Close
		ccfg := capture.DefaultConfig()
		ccfg.PG, ccfg.Slot = cfg.PG, capSlots[i]
		ccfg.Relay.Brokers, ccfg.Relay.Partitions = k.ListenAddrs(), cfg.Partitions
		reg := prometheus.NewRegistry()
		// Heartbeats only at start: measure changes only.
		c, err := capture.New(ccfg, capture.Deps{Log: log, Registerer: reg, OnProduced: observe, HeartbeatTicks: make(chan time.Time)})
		if err != nil {
			return res, err
		}
		log.Info("draining with tidemark capture into kfake", "round", i+1)
		cctx, stop := context.WithCancel(ctx)
		stopCapture = stop
		runtime.GC()
		began = time.Now()
		runErr = make(chan error, 1)
		go func() { runErr <- c.Run(cctx) }()
		acked.Store(0)
		for acked.Load() < int64(cfg.Rows) {
			select {
			case err := <-runErr:
				return res, fmt.Errorf("bench capture: capture stopped: %w", err)
			case <-time.After(5 * time.Millisecond):
			}
		}
		res.CaptureRounds = append(res.CaptureRounds, time.Since(began))
	}
	res.RecvlogicalElapsed, res.CaptureElapsed = bench.Median(res.RecvlogicalRounds), bench.Median(res.CaptureRounds)

	log.Info("steady latency phase", "rate", cfg.Rate, "duration", cfg.Duration)
	// Each commit is flushed at once (production setting), so the walsender
	// sees it without waiting for the WAL writer.
	if _, err := conn.Exec(ctx, "SET synchronous_commit = on"); err != nil {
		return res, err
	}
	mu.Lock()
	recording = true
	mu.Unlock()
	const tick = 10 * time.Millisecond
	perTick := max(1, cfg.Rate*int(tick)/int(time.Second))
	t := time.NewTicker(tick)
	stopAt := time.Now().Add(cfg.Duration)
	next := 0
	for time.Now().Before(stopAt) {
		<-t.C
		lo := next % cfg.Rows
		hi := min(lo+perTick, cfg.Rows) - 1
		next += perTick
		if _, err := conn.Exec(ctx, "UPDATE catalog.items SET version = version + 1 WHERE tenant_id = $1 AND item_id = ANY(SELECT 'i' || g FROM generate_series($2::int, $3::int) g)",
			tenant, lo, hi); err != nil {
			return res, fmt.Errorf("bench capture: steady workload: %w", err)
		}
	}
	t.Stop()
	time.Sleep(500 * time.Millisecond) // the last commits' acks
	if err := cancel(); err != nil {
		return res, err
	}
	mu.Lock()
	defer mu.Unlock()
	l := bench.Summarize(samples)
	res.LatencySamples, res.P50, res.P99, res.Max = l.N, l.P50, l.P99, l.Max
	if _, err := conn.Exec(ctx, "DELETE FROM catalog.items WHERE tenant_id = $1", tenant); err != nil {
		log.Warn("bench capture: cleanup", "err", err)
	}
	return res, nil
}

// WriteTable writes the drain table and the goals.
func (res Result) WriteTable(out io.Writer) error {
	w, cfg := &bench.ErrWriter{W: out}, res.Config
	rounds := func(ds []time.Duration) string {
		var s []string
		for _, d := range ds {
			s = append(s, d.Round(time.Millisecond).String())
		}
		return strings.Join(s, ", ")
	}
	fmt.Fprintf(w, "| drain of %d row changes (pgoutput, same publication) | rounds | median | changes/s |\n|---|---|---|---|\n", res.Rows)
	fmt.Fprintf(w, "| pg_recvlogical (ceiling) | %s | %s | %.0f |\n", rounds(res.RecvlogicalRounds), res.RecvlogicalElapsed.Round(time.Millisecond), res.RecvlogicalRate())
	fmt.Fprintf(w, "| tidemark capture -> kfake (acked) | %s | %s | %.0f |\n", rounds(res.CaptureRounds), res.CaptureElapsed.Round(time.Millisecond), res.CaptureRate())
	fmt.Fprintf(w, "\nGOMAXPROCS %d; ratio capture / pg_recvlogical: %.2fx (goal >= 0.80x)\n", res.GOMAXPROCS, res.CaptureRate()/res.RecvlogicalRate())
	fmt.Fprintf(w, "commit-to-produced at %d changes/s for %s (%d samples): p50 %s, p99 %s, max %s (goal p99 < 20ms)\n",
		cfg.Rate, cfg.Duration, res.LatencySamples, res.P50.Round(10*time.Microsecond), res.P99.Round(10*time.Microsecond), res.Max.Round(10*time.Microsecond))
	return w.Err
}
