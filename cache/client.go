package cache

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/tidemark/tidemark/schema"
)

// Client speaks the cache-tier protocol to Redis (standalone or Cluster). It
// is safe for concurrent use; one per process is enough.
type Client struct {
	cfg     Config
	rdb     redis.UniversalClient
	log     *slog.Logger
	m       *metrics
	s       scripts
	wmKey   string
	wm      atomic.Pointer[Watermark] // latest poll by Run
	leaseMs int64

	// This process's source, when it knows it (source.go).
	expectSource  atomic.Bool
	source        atomic.Pointer[string]
	foreignMu     sync.Mutex
	foreignSeen   string // the foreign source last logged ("": none)
	foreignWarned time.Time
}

// Deps are the Client's dependencies; Log and Registerer may be nil
// (docs/design.md, Lifecycle).
type Deps struct {
	Redis      redis.UniversalClient // required
	Log        *slog.Logger
	Registerer prometheus.Registerer
}

// New checks cfg and builds a Client.
func New(cfg Config, d Deps) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("cache: config: %w", err)
	}
	rdb, log, reg := d.Redis, d.Log, d.Registerer
	if rdb == nil {
		return nil, errors.New("cache: nil redis client")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("cache: metrics: %w", err)
	}
	c := &Client{
		cfg:     cfg,
		rdb:     rdb,
		log:     log.With("component", "cache"),
		m:       m,
		s:       newScripts(),
		wmKey:   schema.WatermarkKey(cfg.Namespace),
		leaseMs: cfg.Lease.Milliseconds(),
	}
	c.wm.Store(&Watermark{})
	return c, nil
}

// Config returns the configuration the client runs with.
func (c *Client) Config() Config { return c.cfg }

func (c *Client) key(tenant, item string) string {
	return schema.RedisKey(c.cfg.Namespace, tenant, item)
}

// forEachMaster runs fn on every master: the one server of a standalone
// client, every master of a Cluster.
func (c *Client) forEachMaster(ctx context.Context, fn func(context.Context, *redis.Client) error) error {
	switch r := c.rdb.(type) {
	case *redis.ClusterClient:
		return r.ForEachMaster(ctx, fn)
	case *redis.Client:
		return fn(ctx, r)
	case *redis.Ring:
		return r.ForEachShard(ctx, fn)
	}
	return fmt.Errorf("unsupported redis client type %T", c.rdb)
}

// LoadScripts loads every script on every master (SCRIPT LOAD). Calls also
// recover lazily from NOSCRIPT (after a restart or SCRIPT FLUSH), so this is
// an optimisation and a start-up connectivity check.
func (c *Client) LoadScripts(ctx context.Context) error {
	err := c.forEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		for _, s := range c.s.all() {
			if err := s.Load(ctx, node).Err(); err != nil {
				return fmt.Errorf("%s: %w", node.Options().Addr, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("cache: load scripts: %w", err)
	}
	return nil
}

// ServerIdentity names the incarnation of the cache tier: run_id and
// master_replid of every master, sorted. It changes when any master restarts
// or fails over, or when the set of masters changes.
func (c *Client) ServerIdentity(ctx context.Context) (string, error) {
	if cc, ok := c.rdb.(*redis.ClusterClient); ok {
		cc.ReloadState(ctx) // pick up failovers before listing masters
	}
	var (
		mu  sync.Mutex
		ids []string
	)
	err := c.forEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		info, err := node.Info(ctx, "server", "replication").Result()
		if err != nil {
			return fmt.Errorf("%s: %w", node.Options().Addr, err)
		}
		runID, replID := infoField(info, "run_id"), infoField(info, "master_replid")
		if runID == "" {
			return fmt.Errorf("%s: INFO has no run_id", node.Options().Addr)
		}
		mu.Lock()
		ids = append(ids, runID+"/"+replID)
		mu.Unlock()
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("cache: server identity: %w", err)
	}
	sort.Strings(ids)
	return strings.Join(ids, ","), nil
}

func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

// Namespace is the key prefix of every key the client reads and writes.
func (c *Client) Namespace() string { return c.cfg.Namespace }
