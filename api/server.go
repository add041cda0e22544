// Package api is the reference catalog service (`tidemark serve`): GET,
// POST, PATCH and DELETE of items on top of the cache tier. Its reads go
// through package reader (min_version reads, a source budget shared by
// every serve process, per-key singleflight, a hot-key L1); the API adds
// HTTP, API keys, writes, the management list and per-tenant rollout.
// docs/design.md, "Reference API" and "Failure model", is the contract.
package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/catalog"
	"github.com/tidemark/tidemark/internal/clockguard"
	"github.com/tidemark/tidemark/internal/lifecycle"
	"github.com/tidemark/tidemark/internal/telemetry"
	"github.com/tidemark/tidemark/migrations"
	"github.com/tidemark/tidemark/reader"
)

// Cache is the part of the cache-tier client (*cache.Client) the API uses
// (reader.Cache).
type Cache = reader.Cache

// Deps are the connections the server uses; the caller owns them (and runs
// the cache client's watermark poller, cache.Client.Run).
type Deps struct {
	Pool       *pgxpool.Pool         // the catalog's primary
	Cache      Cache                 // the cache tier
	Redis      redis.UniversalClient // for the shared source budget
	Log        *slog.Logger
	Registerer prometheus.Registerer // nil: metrics are kept but not exposed
	// Clock is the process's guarded clock (required); the caller measures
	// it before serving and runs it (Guard.Check, Guard.Run).
	Clock *clockguard.Guard
	// Tracer receives a span per sampled GET with its path (L1, cache
	// lookups, lease wait, source read, fill) as children and events; nil:
	// no tracing.
	Tracer trace.TracerProvider
}

// Server is the API. Build it with New and serve Handler, or call Run.
type Server struct {
	cfg      Config
	pool     *pgxpool.Pool
	rdb      redis.UniversalClient
	cache    Cache
	rd       *reader.Reader // the read path
	writes   catalog.WriteSQL
	readOnly error  // non-nil: the table cannot be written by this API (catalog.Table.Writable)
	listSQL  string // catalog.Table.ListSQL
	auth     *authenticator
	rollout  *rollouts // tenants' serving modes (rollout.go)
	tags     tagMemo   // tenants' ETag tags
	m        *metrics
	reg      prometheus.Registerer
	log      *slog.Logger
	tracer   trace.Tracer
	tracing  bool // a tracer provider was given (else GETs start no span at all)
	clock    *clockguard.Guard
	schemaOK atomic.Bool // the database was seen holding the schema this binary needs (Ready)
	// sourceKnown: the cache client was told this process's source
	// (runSource), so the watermark can vouch again.
	sourceKnown atomic.Bool

	base   context.Context // parent of background work; cancelled by Run's end
	cancel context.CancelFunc
	bg     sync.WaitGroup

	handler http.Handler
}

// New builds the server; it does not listen yet.
func New(cfg Config, deps Deps) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("api: %w", err)
	}
	var missing []string
	if deps.Pool == nil {
		missing = append(missing, "Pool")
	}
	if deps.Cache == nil {
		missing = append(missing, "Cache")
	}
	if deps.Redis == nil {
		missing = append(missing, "Redis")
	}
	if deps.Clock == nil {
		missing = append(missing, "Clock")
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("api: missing dependencies: %v", missing)
	}
	log := deps.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "api")
	reg := deps.Registerer
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("api: metrics: %w", err)
	}
	clock := deps.Clock
	s := &Server{
		cfg:     cfg,
		pool:    deps.Pool,
		rdb:     deps.Redis,
		cache:   deps.Cache,
		auth:    newAuthenticator(deps.Pool, cfg.AuthTTL, cfg.AuthStale, cfg.RequestTimeout, log),
		m:       m,
		reg:     reg,
		log:     log,
		tracer:  telemetry.Tracer(deps.Tracer, "api"),
		tracing: deps.Tracer != nil,
		clock:   clock,
	}
	deps.Cache.ExpectSource()
	src := reader.NewTableSource(deps.Pool, cfg.Table, cfg.SourceTimeout)
	if s.rd, err = reader.New(cfg.readerConfig(), reader.Deps{Source: src, SourceDB: deps.Pool, Cache: deps.Cache, Redis: deps.Redis, Clock: clock,
		Log: log, Registerer: reg, MetricsStage: "api", Tracer: deps.Tracer}); err != nil {
		return nil, fmt.Errorf("api: %w", err)
	}
	if s.readOnly = cfg.Table.Writable(); s.readOnly == nil {
		s.writes = cfg.Table.Writes()
	}
	if cfg.Table.UpdatedAtColumn != "" {
		s.listSQL = cfg.Table.ListSQL()
	}
	if s.rollout, err = newRollouts(cfg, deps.Redis, deps.Pool, reg, log, clock.Wall); err != nil {
		return nil, fmt.Errorf("api: %w", err)
	}
	s.base, s.cancel = context.WithCancel(context.Background())
	s.handler = s.routes()
	return s, nil
}

const (
	routeGet    = "get_item"
	routeCreate = "create_item"
	routePatch  = "patch_item"
	routeDelete = "delete_item"
	routeList   = "list_items"
	routeBatch  = "batch_get_items"
)

// writable answers 405 for a write to a table the reference API cannot
// write (catalog.Table.Writable): its writes go through the operator's own
// application, and tidemark only reads and invalidates.
func (s *Server) writable(h func(http.ResponseWriter, *http.Request, string)) func(http.ResponseWriter, *http.Request, string) {
	if s.readOnly == nil {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request, _ string) {
		w.Header().Set("Allow", "GET")
		writeError(w, http.StatusMethodNotAllowed, "read_only", s.readOnly.Error())
	}
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /v1/catalog/items/{id}", s.endpoint(routeGet, s.getItem))
	mux.Handle("GET /v1/catalog/items", s.endpoint(routeList, s.listItems))
	mux.Handle("GET /v1/catalog/items:batchGet", s.endpoint(routeBatch, s.batchGet))
	mux.Handle("POST /v1/catalog/items", s.endpoint(routeCreate, s.writable(s.createItem)))
	mux.Handle("PATCH /v1/catalog/items/{id}", s.endpoint(routePatch, s.writable(s.patchItem)))
	mux.Handle("DELETE /v1/catalog/items/{id}", s.endpoint(routeDelete, s.writable(s.deleteItem)))
	mux.HandleFunc("GET /v1/openapi.json", serveOpenAPI)
	return mux
}

// Handler is the API's HTTP handler (for embedding, e.g. by `tidemark-lab dev`).
func (s *Server) Handler() http.Handler { return s.handler }

// Run listens on cfg.Addr and serves until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("api: listen on %s: %w", s.cfg.Addr, err)
	}
	return s.Serve(ctx, ln)
}

// Serve serves on ln until ctx ends, then shuts down within 5 s and waits for
// background refreshes.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	defer s.close()
	// A namespace bound to another table mapping or source pool is refused
	// before the first request (a Redis that cannot be asked now is asked
	// again by the reader's Run, which stops the server if it refuses).
	if err := s.rd.Claim(ctx); errors.Is(err, cache.ErrIdentity) {
		ln.Close()
		return fmt.Errorf("api: %w", err)
	}
	// This process's name in its pool: its host and where it listens, which
	// no other live process can share, so a restart in place takes over its
	// predecessor's presence instead of waiting for it to expire.
	host, _ := os.Hostname() // without one, the address alone still names this process on its host
	s.rd.SetInstance(host + "|" + ln.Addr().String())
	// The rollout settings are decided before the first request: until
	// then every tenant would follow the default, a rolled-back one too.
	s.rollout.tick(ctx)
	ctx, refuse := context.WithCancelCause(ctx)
	defer refuse(nil)
	// Counted in the source pool, with the pool's budget agreed, before
	// the first request: until its first beat a process admits at its own
	// rates, which may be above the rest of the pool's.
	if err := s.rd.Join(ctx); err != nil && ctx.Err() == nil {
		s.log.Warn("joining the source pool failed; the presence beat retries every second", "err", err)
	}
	s.bg.Add(4)
	go func() { defer s.bg.Done(); s.runSource(s.base) }()
	go func() {
		defer s.bg.Done()
		if err := s.rd.Run(s.base); err != nil {
			refuse(err)
		}
	}()
	go func() { defer s.bg.Done(); s.rollout.run(s.base) }()
	go func() { defer s.bg.Done(); s.runPruning(s.base) }()
	// Slow clients cannot hold connections: headers within 5 s, the whole
	// request (body included) within 10 s, the answer written within the
	// longest handler deadline plus a margin, idle keep-alives 2 min.
	srv := &http.Server{Handler: s.handler, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: max(s.cfg.RequestTimeout+s.cfg.SourceTimeout, s.cfg.WriteTimeout) + 5*time.Second, IdleTimeout: 2 * time.Minute}
	s.log.Info("serving catalog API", "addr", ln.Addr().String())
	if err := lifecycle.ServeHTTP(ctx, srv, ln, lifecycle.ShutdownGrace); err != nil {
		return fmt.Errorf("api: %w", err)
	}
	if err := context.Cause(ctx); errors.Is(err, cache.ErrIdentity) {
		return fmt.Errorf("api: %w", err)
	}
	return nil
}

// close stops the server's background work and the read path's, and waits
// for them.
func (s *Server) close() {
	s.cancel()
	s.bg.Wait()
	s.rd.Close()
}

// Ready reports whether this process can answer reads now (for /readyz):
// the clock is trusted and either the cache tier answers and this process
// holds its namespace's identity (reads come from the cache) or Postgres
// does (reads go to the source within the budget).
// A Postgres blip alone does not take every serve process out of its
// Service at once: the cache still answers. A process is first ready once
// registered on the source and counted by the readers of the source's
// other pools (reader.Reader.SourceErr): before, it admits no source read.
//
// Before that, the database must hold the schema this binary needs: against
// an unmigrated (or older) one every read would fail, so the process stays
// out of its Service with the reason (migrations.Check) until migrate has
// run; and a display expression must read only the item's row
// (catalog.Table.CheckDisplay). Once seen sound it is not read again: a
// schema is not migrated down under a running release.
func (s *Server) Ready(ctx context.Context) error {
	if !s.schemaOK.Load() {
		if err := migrations.Check(ctx, s.pool); err != nil {
			return fmt.Errorf("api: %w", err)
		}
		// A display expression that reads another table would be served
		// stale whatever capture does: out of the Service, with the reason.
		if err := s.cfg.Table.CheckDisplay(ctx, s.pool); err != nil {
			return fmt.Errorf("api: %w", err)
		}
		s.schemaOK.Store(true)
	}
	if err := s.clock.Ready(ctx); err != nil {
		return fmt.Errorf("api: %w", err)
	}
	rerr := s.rdb.Ping(ctx).Err()
	if rerr == nil {
		// Redis answers, so the namespace's identity can be claimed: not
		// ready before it was, nor after a refusal (Serve stops then).
		if err := s.rd.IdentityErr(); err != nil {
			return fmt.Errorf("api: %w", err)
		}
	} else if perr := s.pool.Ping(ctx); perr != nil {
		return fmt.Errorf("api: neither the cache nor the source answers: redis: %w; postgres: %w", rerr, perr)
	}
	// Registered on the source and counted by its other pools' readers
	// (once): until then the budget admits no source read.
	if err := s.rd.SourceErr(); err != nil {
		return fmt.Errorf("api: %w", err)
	}
	if !s.sourceKnown.Load() {
		return errSourceUnknown
	}
	return nil
}

// sourceEvery is how often runSource reads the source's name again once
// it knows it.
const sourceEvery = 10 * time.Second

// errSourceUnknown: Ready before runSource learnt the source.
var errSourceUnknown = errors.New("api: the source's name is not known yet (the watermark vouches for nothing until it is)")

// runSource learns this process's source (catalog.Table.Source) and tells
// the cache client, which trusts a watermark only of that source
// (cache/source.go): every second until the source answers, then every
// sourceEvery (a database restored to a new server is a new source, and
// its capture's markers name it).
func (s *Server) runSource(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	known := ""
	for warned := false; ; {
		qctx, cancel := context.WithTimeout(ctx, s.cfg.SourceTimeout)
		src, err := s.cfg.Table.Source(qctx, s.pool)
		cancel()
		switch {
		case err == nil && src != known:
			s.cache.SetSource(src)
			s.log.Info("the watermark vouches only for resolved markers of this source", "source", src, "before", known)
			if known == "" {
				t.Reset(sourceEvery)
			}
			known = src
			s.sourceKnown.Store(true)
		case err == nil:
		case ctx.Err() != nil:
			return
		case !warned:
			warned = true
			s.log.Warn("cannot read the source's name; the watermark vouches only for the one read last (none before the first)", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
