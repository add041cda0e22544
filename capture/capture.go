package capture

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/tidemark/tidemark/internal/secretfile"
	"github.com/tidemark/tidemark/internal/telemetry"
	"github.com/tidemark/tidemark/relay"
	"github.com/tidemark/tidemark/schema"
)

// Deps are what a capture stage is given.
type Deps struct {
	Log        *slog.Logger
	Registerer prometheus.Registerer
	KafkaOpts  []kgo.Opt // extra franz-go options (tests, benchmarks)
	// OnProduced sees each acked change's commit-to-produced latency (benchmarks).
	OnProduced func(time.Duration)
	// HeartbeatTicks, when set, is when a heartbeat follows the first (one
	// is written at start); nil: every Config.Heartbeat. Tests and
	// benchmarks that must see changes only pass a channel that never
	// fires; no flag reaches it.
	HeartbeatTicks <-chan time.Time
	// Tracer starts a trace for each sampled change (capture.change, then
	// kafka.produce, continued by the applier through the record's
	// headers); nil: no tracing.
	Tracer trace.TracerProvider
}

// Capture streams one slot to Kafka. Run it once.
type Capture struct {
	cfg   Config
	log   *slog.Logger
	m     *metrics
	relay *relay.Producer
	// tracer is nil without a tracer provider: no span is started per change.
	tracer trace.Tracer

	mu       sync.Mutex
	readyErr error  // nil while streaming or standing by
	lastWAL  string // the slot's last polled wal_status
	active   atomic.Bool

	streamed bool // the last session reached streaming (Run's goroutine only)
	// dataLoss: Kafka lost records it had acknowledged; the next session
	// sends a reset marker (Run's goroutine only).
	dataLoss bool
	// saved is the state the session's gap check saved (the publication
	// watch saves it again with a new fingerprint); set before the
	// session's goroutines start.
	saved relay.State

	// The process's own loops, for Live: the stream (watched only while
	// streaming) and the slot poller (always).
	streamLoop, pollLoop *telemetry.Loop

	// crashed makes the next shutdown skip the flush and the final status,
	// as if the process died (tests only).
	crashed atomic.Bool
	// checkDelay is waited before each visibility snapshot (tests only: a
	// Postgres far away).
	checkDelay time.Duration
	// heartbeatTicks is Deps.HeartbeatTicks.
	heartbeatTicks <-chan time.Time
}

// errCrashed is returned by Run after a simulated crash.
var errCrashed = errors.New("capture: crashed (test)")

// New validates cfg and builds the stage; nothing connects until Run.
func New(cfg Config, deps Deps) (*Capture, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	if deps.Registerer == nil {
		deps.Registerer = prometheus.NewRegistry()
	}
	m, err := newMetrics(deps.Registerer)
	if err != nil {
		return nil, err
	}
	log := deps.Log.With("component", "capture", "slot", cfg.Slot)
	p, err := relay.New(cfg.Relay, relay.Deps{Log: deps.Log, Registerer: deps.Registerer, Opts: deps.KafkaOpts, OnProduced: deps.OnProduced,
		Tracer: deps.Tracer})
	if err != nil {
		return nil, err
	}
	m.setWALStatus("")
	var tracer trace.Tracer
	if deps.Tracer != nil {
		tracer = telemetry.Tracer(deps.Tracer, "capture")
	}
	return &Capture{cfg: cfg, log: log, m: m, relay: p, tracer: tracer, readyErr: errors.New("capture: not streaming yet"), heartbeatTicks: deps.HeartbeatTicks,
		// The stream goes round at least every StatusInterval (its socket
		// deadline); the poller every SlotPoll plus its 5 s connect and
		// 5 s query bounds.
		streamLoop: telemetry.NewLoop("capture: stream", 10*cfg.StatusInterval+20*time.Second),
		pollLoop:   telemetry.NewLoop("capture: slot poller", 3*cfg.SlotPoll+20*time.Second),
	}, nil
}

// Ready reports nil while capture streams, and while it stands by holding a
// valid position: Postgres and Kafka passed the preflight and gap checks and
// the slot exists but is active in another process, which this one takes
// over as soon as it is freed. A two-replica Deployment is then fully ready
// with one active replica.
func (c *Capture) Ready(context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.readyErr
}

// Active reports whether this process holds the slot and streams (the
// tidemark_capture_active gauge).
func (c *Capture) Active() bool { return c.active.Load() }

// Live reports an error when one of capture's own loops has stopped making
// progress (not when Postgres or Kafka are down: the loops keep retrying,
// and a restart would not help).
func (c *Capture) Live(context.Context) error {
	now := time.Now()
	return errors.Join(c.streamLoop.Check(now), c.pollLoop.Check(now))
}

func (c *Capture) setReady(err error) {
	c.mu.Lock()
	c.readyErr = err
	c.mu.Unlock()
}

// fatal reports errors that retrying cannot fix.
func fatal(err error) bool {
	// relay.ErrDataLoss and relay.ErrTopicView are retried: the next
	// session handles them.
	return errors.Is(err, ErrPreflight) || errors.Is(err, ErrDecode) || errors.Is(err, relay.ErrProduce) || errors.Is(err, relay.ErrTopicConfig)
}

// Run streams until ctx ends (then it shuts down in order and returns nil)
// or a fatal error. Lost Postgres or Kafka connections are retried with
// backoff, resuming from the slot.
//
// Shutdown order (each session): stop reading WAL; stop heartbeats and the
// slot poll; flush the producer (bounded by ShutdownTimeout); send the
// final standby status with the newest fully acked LSN; close the
// replication connection; finally close the Kafka client.
func (c *Capture) Run(ctx context.Context) error {
	defer c.relay.Close()
	pctx, stopPoll := context.WithCancel(ctx)
	pollDone := make(chan struct{})
	go func() { defer close(pollDone); c.watchSlot(pctx) }()
	defer func() { stopPoll(); <-pollDone }()
	backoff := c.cfg.RetryMin
	var lastWarn string
	for {
		err := c.session(ctx)
		if errors.Is(err, ErrNotSetUp) {
			c.setReady(err) // the reason /readyz and the status page give
		} else {
			c.setReady(errors.New("capture: not streaming"))
		}
		c.active.Store(false)
		c.m.active.Set(0)
		if c.crashed.Load() {
			return errCrashed
		}
		if ctx.Err() != nil {
			if err != nil && !errors.Is(err, context.Canceled) {
				return err
			}
			return nil
		}
		if fatal(err) {
			return err
		}
		if c.streamed {
			// A healthy session ended: start the backoff and the log over.
			c.streamed, backoff, lastWarn = false, c.cfg.RetryMin, ""
		}
		if err.Error() != lastWarn { // log a repeating failure once
			c.log.Warn("capture interrupted; retrying", "err", err, "backoff", backoff)
			lastWarn = err.Error()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, c.cfg.RetryMax)
	}
}

// session is one connection's life: preflight, gap check, acquire the
// slot, stream, and shut down in order.
func (c *Capture) session(ctx context.Context) error {
	conn, err := c.connect(ctx)
	if err != nil {
		return fmt.Errorf("capture: connect: %w", err)
	}
	defer conn.Close(context.Background())
	si, err := c.preflight(ctx, conn)
	if err != nil {
		return err
	}
	repl, err := c.replicationConn(ctx)
	if err != nil {
		return err
	}
	defer repl.Close(context.Background())
	// After the replication connection, which refuses a role without
	// REPLICATION with the fix; before anything is written to the topic.
	if err := c.claimSlot(ctx, conn); err != nil {
		return err
	}
	ident, err := pglogrepl.IdentifySystem(ctx, repl)
	if err != nil {
		return fmt.Errorf("capture: identify system: %w", err)
	}
	if err := c.relay.Renew(); err != nil {
		return err
	}
	partitions, history, err := c.relay.Topic(ctx)
	if err != nil {
		return err
	}
	if si, err = c.checkGap(ctx, conn, si, ident, history, partitions); err != nil {
		return err
	}
	if err := c.acquire(ctx, repl); err != nil {
		return err
	}
	// Claimed again now that the slot exists and is this process's: two
	// deployments' captures that both claimed it while it did not exist
	// (the second claim replaces the first) are told apart here.
	if err := c.claimSlot(ctx, conn); err != nil {
		return err
	}
	// The slot may have advanced while another instance held it.
	start, err := confirmedFlush(ctx, conn, c.cfg.Slot)
	if err != nil {
		return err
	}
	// The visibility checker's connection, before any goroutine of the
	// session starts: a failure here returns with none running that could
	// still use conn as the deferred Close runs.
	vconn, err := c.connect(ctx)
	if err != nil {
		return fmt.Errorf("capture: connect for visibility checks: %w", err)
	}
	defer vconn.Close(context.Background())
	vis, err := newVisibility(ctx, vconn.PgConn(), c.m.checks, c.checkDelay)
	if err != nil {
		return err
	}
	c.log.Info("streaming", "from", start, "partitions", partitions, "topic", c.cfg.Relay.Topic)
	c.setReady(nil)
	c.active.Store(true)
	c.m.active.Set(1)
	c.streamed = true

	sctx, cancel := context.WithCancelCause(ctx)
	var wg sync.WaitGroup
	// Stopped and waited for before the connections close (defers run
	// last-in first-out), whichever way the session returns.
	defer func() { cancel(nil); wg.Wait() }()
	wg.Add(2)
	go func() {
		defer wg.Done()
		c.heartbeats(sctx, &publicationWatch{fp: si.fp, partitions: partitions, stop: cancel})
	}()
	go func() { defer wg.Done(); c.pollSlot(sctx, conn, cancel) }()

	st := newStreamer(c, repl, partitions, start)
	st.vis = vis
	wg.Add(1)
	go func() { defer wg.Done(); vis.run(sctx) }()
	streamErr := st.run(sctx)
	c.streamLoop.Pause()
	cancel(streamErr)
	wg.Wait()
	if cause := context.Cause(sctx); streamErr == nil || errors.Is(streamErr, context.Canceled) {
		if cause != nil && !errors.Is(cause, context.Canceled) {
			streamErr = cause
		}
	}
	if ctx.Err() == nil && streamErr == nil {
		streamErr = errors.New("capture: stream ended")
	}
	c.setReady(errors.New("capture: shutting down"))
	if c.crashed.Load() {
		return errCrashed
	}
	if errors.Is(streamErr, relay.ErrDataLoss) {
		// Records Kafka acknowledged are gone, and some of their LSNs may
		// be confirmed already. Confirm nothing more (no final status: the
		// tracker counts the lost records as acked); the next session
		// sends a reset marker for what was confirmed and streams again
		// from the slot's position for what was not.
		c.dataLoss = true
		c.log.Error("kafka lost records it had acknowledged: confirming nothing more; the next session marks a gap and re-sends from the slot", "err", streamErr)
		return streamErr
	}
	// Flush even on error: what Kafka acks can still be confirmed.
	fctx, fcancel := context.WithTimeout(context.Background(), c.cfg.ShutdownTimeout)
	defer fcancel()
	var flushErr error
	if err := c.relay.Flush(fctx); err != nil {
		// Not data loss (nothing unacked is confirmed), but not a clean exit.
		flushErr = fmt.Errorf("capture: kafka did not ack %d record(s) within the shutdown timeout; they stay unconfirmed and are re-sent on restart: %w",
			st.tr.Inflight(), err)
	}
	st.finish(fctx)
	if ctx.Err() != nil && (streamErr == nil || errors.Is(streamErr, context.Canceled)) {
		return flushErr
	}
	return errors.Join(streamErr, flushErr)
}

// connect opens a connection with the current DSN (PGFile read again, so a
// reconnect after a password rotation uses the new one).
func (c *Capture) connect(ctx context.Context) (*pgx.Conn, error) {
	cc, err := secretfile.PGConfig(c.cfg.PG, c.cfg.PGFile)
	if err != nil {
		return nil, err
	}
	return pgx.ConnectConfig(ctx, cc)
}

func (c *Capture) replicationConn(ctx context.Context) (*pgconn.PgConn, error) {
	dsn, err := secretfile.Value(c.cfg.PG, c.cfg.PGFile)
	if err != nil {
		return nil, fmt.Errorf("capture: Postgres DSN: %w", err)
	}
	pc, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("capture: Postgres DSN: %w", err)
	}
	pc.RuntimeParams["replication"] = "database"
	conn, err := pgconn.ConnectConfig(ctx, pc)
	if err != nil {
		if pe := replicationRefused(pc.User, err); pe != nil {
			return nil, pe
		}
		return nil, fmt.Errorf("capture: replication connection: %w", err)
	}
	return conn, nil
}

// acquire starts replication, waiting while another instance holds the slot
// (active/passive: the walsender frees the slot as soon as the other
// process's connection drops).
func (c *Capture) acquire(ctx context.Context, repl *pgconn.PgConn) error {
	opts := pglogrepl.StartReplicationOptions{PluginArgs: []string{
		"proto_version '1'",
		fmt.Sprintf("publication_names '%s'", c.cfg.Publication),
		"messages 'true'",
	}}
	backoff, logged := c.cfg.RetryMin, false
	for {
		// LSN 0: the server starts at the slot's confirmed_flush_lsn.
		err := pglogrepl.StartReplication(ctx, repl, c.cfg.Slot, 0, opts)
		if err == nil {
			if logged {
				c.log.Info("took over the slot")
			}
			return nil
		}
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "55006" { // object_in_use: active for another PID
			return fmt.Errorf("capture: start replication: %w", err)
		}
		if !logged {
			c.log.Info("slot is active in another process; standing by to take over", "detail", pe.Message)
			logged = true
		}
		c.setReady(nil) // a valid standby position: see Ready
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, c.cfg.RetryMax)
	}
}

func confirmedFlush(ctx context.Context, conn *pgx.Conn, slot string) (schema.LSN, error) {
	var s *string
	if err := conn.QueryRow(ctx, "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&s); err != nil {
		return 0, fmt.Errorf("capture: read slot position: %w", err)
	}
	if s == nil {
		return 0, nil
	}
	return schema.ParseLSN(*s)
}
