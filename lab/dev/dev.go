package dev

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/internal/telemetry"
	"github.com/tidemark/tidemark/internal/wiring"
	"github.com/tidemark/tidemark/lab/broker"
	"github.com/tidemark/tidemark/lab/localserver"
	"github.com/tidemark/tidemark/migrations"

	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/lifecycle"
)

// Config of `tidemark-lab dev`.
type Config struct {
	DataDir     string   // --data-dir: private servers' data, reused across runs
	PG          string   // --pg: use this catalog database instead of a private Postgres
	Redis       string   // --redis: use this cache tier instead of a private redis-server
	Kafka       []string // --kafka: use these brokers instead of an embedded one
	SyncWrites  bool     // --sync-writes: the embedded broker fsyncs every batch
	MetricsAddr string   // --metrics-addr
	DemoLoad    float64  // --demo-load: requests/s against the API (0: none)
	Pipeline    PipelineConfig
}

// DefaultConfig is `tidemark-lab dev` with no flags.
func DefaultConfig() Config {
	return Config{DataDir: ".tidemark", MetricsAddr: "127.0.0.1:9100", Pipeline: DefaultPipelineConfig()}
}

// Validate reports every problem at once, one config.FieldError per field
// (the cache tier's under "Pipeline.Cache.").
func (c Config) Validate() error {
	var p config.Problems
	if c.DataDir == "" {
		p.Add("DataDir", "must not be empty")
	}
	if c.DemoLoad < 0 || c.DemoLoad > 100000 {
		p.Add("DemoLoad", "must be between 0 and 100000 requests/s (got %v)", c.DemoLoad)
	}
	if c.Pipeline.APIAddr == "" {
		p.Add("Pipeline.APIAddr", "must not be empty")
	}
	if c.Pipeline.Partitions < 1 {
		p.Add("Pipeline.Partitions", "must be at least 1 (got %d)", c.Pipeline.Partitions)
	}
	p.Nested("Pipeline.Cache", c.Pipeline.Cache.Validate())
	return p.Err()
}

// Deps of a dev run.
type Deps struct {
	Log      *slog.Logger
	Out      io.Writer // banner and status line
	Terminal bool      // Out is a terminal: redraw the status line in place
	// Ready, when set, is called once the pipeline is ready, with the
	// endpoints in use (tests and embedding programs).
	Ready func(Endpoints)
}

// Dev is one `tidemark-lab dev` run.
type Dev struct {
	cfg   Config
	base  *slog.Logger // for the stages, which add their own component
	log   *slog.Logger
	out   io.Writer
	term  bool
	ready func(Endpoints)
}

// New checks the config.
func New(cfg Config, deps Deps) (*Dev, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	if deps.Out == nil {
		deps.Out = io.Discard
	}
	return &Dev{cfg: cfg, base: deps.Log, log: deps.Log.With("component", "dev"), out: deps.Out, term: deps.Terminal, ready: deps.Ready}, nil
}

// Run starts what is missing, migrates, seeds, runs the pipeline until ctx
// ends, then shuts everything down in order (docs/design.md, "Lifecycle
// and shutdown order").
func (d *Dev) Run(ctx context.Context) error {
	if err := os.MkdirAll(d.cfg.DataDir, 0o755); err != nil {
		return fmt.Errorf("dev: data directory: %w", err)
	}
	ep, stopServers, err := d.servers(ctx)
	defer stopServers()
	if err != nil {
		return err
	}
	res, err := migrations.Up(ctx, ep.PG, d.log)
	if err != nil {
		return err
	}
	if len(res.Applied) > 0 {
		d.log.Info("migrated", "version", res.Current)
	}
	keys, fresh, err := seedDemo(ctx, ep.PG, filepath.Join(d.cfg.DataDir, "demo-api-keys"))
	if err != nil {
		return err
	}
	p, err := startPipeline(ctx, NewStages(d.cfg.Pipeline, ep, d.base), d.cfg.MetricsAddr, d.base)
	if err != nil {
		return err
	}
	d.banner(ep, p, keys, fresh)
	if d.ready != nil {
		d.ready(ep)
	}

	var load *loadGen
	var wg sync.WaitGroup
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	if d.cfg.DemoLoad > 0 {
		load = newLoadGen("http://"+d.cfg.Pipeline.APIAddr, keys, d.cfg.DemoLoad, d.base)
		wg.Add(1)
		go func() { defer wg.Done(); load.run(loadCtx) }()
	}
	wg.Add(1)
	go func() { defer wg.Done(); newStatusLine(d.out, d.term, p, load).run(loadCtx) }()

	select {
	case <-ctx.Done():
	case <-p.failed():
	}
	// Shutdown order: load and status line first (they use the API), then
	// the pipeline (API, capture, applier, cache poller, telemetry; see
	// pipeline.stop), then the servers (deferred: Kafka, Redis, Postgres).
	stopLoad()
	wg.Wait()
	if d.term {
		fmt.Fprintln(d.out)
	}
	err = p.stop()
	d.log.Info("stopped; the data dir is reusable", "data_dir", d.cfg.DataDir)
	return err
}

// servers returns the endpoints, starting private servers for those not
// given. stop stops what was started, in reverse order.
func (d *Dev) servers(ctx context.Context) (Endpoints, func(), error) {
	var stops []func()
	stop := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	ep := Endpoints{PG: d.cfg.PG, Redis: d.cfg.Redis, Brokers: d.cfg.Kafka}
	if ep.PG == "" {
		pg, err := localserver.NewPostgres(localserver.PostgresConfig{Dir: filepath.Join(d.cfg.DataDir, "postgres")})
		if err != nil {
			return ep, stop, fmt.Errorf("dev: private postgres: %w", err)
		}
		stops = append(stops, pg.Stop)
		if err := createDatabase(ctx, pg.DSN("postgres"), "catalog"); err != nil {
			return ep, stop, err
		}
		ep.PG = pg.DSN("catalog")
		d.log.Info("private postgres", "dsn", ep.PG, "dir", pg.Dir)
	}
	if ep.Redis == "" {
		r, err := localserver.NewRedis(localserver.RedisConfig{Dir: filepath.Join(d.cfg.DataDir, "redis"), Persist: true})
		if err != nil {
			return ep, stop, fmt.Errorf("dev: private redis: %w", err)
		}
		stops = append(stops, r.Stop)
		ep.Redis = r.URL()
		d.log.Info("private redis", "url", ep.Redis)
	}
	if len(ep.Brokers) == 0 {
		b, err := broker.New(broker.Config{DataDir: filepath.Join(d.cfg.DataDir, "kafka"), SyncWrites: d.cfg.SyncWrites, Brokers: 1,
			Partitions: d.cfg.Pipeline.Partitions}, broker.Deps{Log: d.base})
		if err != nil {
			return ep, stop, err
		}
		ep.Brokers = b.Addrs()
		stops = append(stops, b.Close)
		d.log.Info("embedded kafka (not for production)", "brokers", strings.Join(ep.Brokers, ","))
	}
	return ep, stop, nil
}

func createDatabase(ctx context.Context, adminDSN, name string) error {
	conn, err := pgx.Connect(ctx, adminDSN)
	if err != nil {
		return fmt.Errorf("dev: connect to postgres: %w", err)
	}
	defer conn.Close(context.Background())
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return fmt.Errorf("dev: check database: %w", err)
	}
	if !exists {
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
			return fmt.Errorf("dev: create database: %w", err)
		}
	}
	return nil
}

func (d *Dev) banner(ep Endpoints, p *pipeline, keys []apiKey, fresh bool) {
	w := d.out
	api := "http://" + d.cfg.Pipeline.APIAddr
	fmt.Fprintf(w, "\ntidemark dev is running (Ctrl-C stops everything in order; %s is reused next time)\n\n", d.cfg.DataDir)
	fmt.Fprintf(w, "  API        %s/v1/catalog/items/{id}\n", api)
	fmt.Fprintf(w, "  status     http://%s/   (also /status.json, /metrics, /healthz, /readyz)\n", p.metricsAddr)
	fmt.Fprintf(w, "  postgres   %s\n", ep.PG)
	fmt.Fprintf(w, "  redis      %s\n", ep.Redis)
	fmt.Fprintf(w, "  kafka      %s   topic %s\n", strings.Join(ep.Brokers, ","), d.cfg.Pipeline.Topic)
	if fresh {
		fmt.Fprintf(w, "\n  demo API keys (shown once; kept for the demo load in %s):\n", filepath.Join(d.cfg.DataDir, "demo-api-keys"))
		for _, k := range keys {
			fmt.Fprintf(w, "    %-8s %s\n", k.tenant, k.key)
		}
	}
	if len(keys) > 0 {
		k := keys[0]
		key := k.key
		if !fresh {
			key = "$(awk '$1==\"" + k.tenant + "\"{print $2}' " + filepath.Join(d.cfg.DataDir, "demo-api-keys") + ")"
		}
		fmt.Fprintf(w, "\n  try:  curl -i -H \"Authorization: Bearer %s\" %s/v1/catalog/items/item-00001\n", key, api)
		fmt.Fprintf(w, "        tidemark status --kafka %s --redis %s --pg '%s'\n\n", strings.Join(ep.Brokers, ","), ep.Redis, ep.PG)
	}
}

// pipeline is the running stages of one process: one lifecycle.Group, run
// in the background until stop (or until a stage fails, which stops them
// all and closes failed).
type pipeline struct {
	metricsAddr string
	stats       *statsSource
	cancel      context.CancelFunc
	done        chan struct{} // closed when the group has stopped
	err         error         // the group's, valid after done
	closeConns  func() error
}

func (p *pipeline) failed() <-chan struct{} { return p.done }

// stop stops the stages in the group's order, closes the connections and
// returns what failed.
func (p *pipeline) stop() error {
	p.cancel()
	<-p.done
	return errors.Join(p.err, p.closeConns())
}

// start runs g in the background.
func (p *pipeline) start(g *lifecycle.Group) {
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel, p.done = cancel, make(chan struct{})
	go func() {
		defer close(p.done)
		p.err = g.RunServices(ctx) // in dev, a part that ends by itself fails the pipeline
	}()
}

// startPipeline builds every role through internal/wiring, as capture,
// apply and serve do, and starts them as one lifecycle.Group, so the stop
// order is the group's: the API and its helpers first (no new reads of the
// source), then capture (flush and confirm), the applier (commit what was
// applied), the cache poller and clock guard, the status page and telemetry
// last.
func startPipeline(ctx context.Context, st *Stages, metricsAddr string, log *slog.Logger) (*pipeline, error) {
	reg := telemetry.NewRegistry(telemetry.Pipeline{Namespace: st.cfg.Namespace, Topic: st.cfg.Topic})
	pool, err := st.Pool(ctx)
	if err != nil {
		return nil, err
	}
	tier, err := wiring.OpenTier(cache.RedisConfig{URL: st.ep.Redis}, st.cfg.Cache, pool, log, reg)
	if err != nil {
		pool.Close()
		return nil, err
	}
	closeConns := func() error { pool.Close(); return tier.Close() }
	var g lifecycle.Group
	srv, err := wiring.AddServe(ctx, &g, st.ServeConfig(), tier, pool, log, reg, nil)
	if err != nil {
		return nil, errors.Join(err, closeConns())
	}
	capt, err := wiring.AddCapture(&g, st.CaptureConfig(), log, reg, nil)
	if err != nil {
		return nil, errors.Join(err, closeConns())
	}
	app, err := wiring.AddApply(&g, st.ApplierConfig(), tier, log, reg, nil)
	if err != nil {
		return nil, errors.Join(err, closeConns())
	}
	tier.Add(&g)
	page, err := st.StatusPage(reg)
	if err != nil {
		return nil, errors.Join(err, closeConns())
	}
	tel, err := telemetry.NewServer(metricsAddr, reg, log, capt.Ready, app.Ready, srv.Ready)
	if err != nil {
		return nil, errors.Join(err, closeConns())
	}
	tel.Handle("/", page.Handler())
	p := &pipeline{metricsAddr: tel.Addr(), stats: &statsSource{gather: reg, cache: tier.Cache}, closeConns: closeConns}
	g.Add(lifecycle.Observe, "status page", page.Run)
	g.Add(lifecycle.Telemetry, "telemetry", tel.Run)
	p.start(&g)

	// Ready when every stage says so (the watermark is known, the API listens).
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	err = waitFor(rctx, "waiting for the pipeline to become ready", func(ctx context.Context) error {
		select {
		case <-p.done:
			return nil // reported below
		default:
		}
		return errors.Join(capt.Ready(ctx), app.Ready(ctx), app.WatermarkKnown(ctx), srv.Ready(ctx))
	})
	select {
	case <-p.done:
		return nil, p.stop()
	default:
	}
	if err != nil {
		return nil, errors.Join(err, p.stop())
	}
	return p, nil
}
