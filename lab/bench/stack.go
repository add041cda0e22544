package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/tidemark/tidemark/api"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/lab/localserver"
	"github.com/tidemark/tidemark/lab/proc"
	"github.com/tidemark/tidemark/migrations"
	"github.com/tidemark/tidemark/schema"
)

// Stack is what the harnesses that run `tidemark serve` as a separate
// process start for themselves: a private Postgres with the migrations
// applied (pg_stat_statements preloaded, so source reads can be counted) and
// a redis-server without persistence (so killing it loses the cache).
// lab/localserver runs both; lab/testenv is for tests only.
type Stack struct {
	Postgres *localserver.Postgres
	Redis    *localserver.Redis
	DSN      string        // Postgres, database postgres
	Pool     *pgxpool.Pool // to DSN, with pg_stat_statements created (SourceReads)
}

// StartStack starts the servers and migrates the database (logging to log;
// nil: nowhere); name labels their temporary directories.
func StartStack(ctx context.Context, name string, log *slog.Logger) (*Stack, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Stack{}
	rdir, err := os.MkdirTemp("", "tidemark-bench-"+name+"-redis-")
	if err != nil {
		return nil, err
	}
	if s.Redis, err = localserver.NewRedis(localserver.RedisConfig{Dir: rdir}); err != nil {
		os.RemoveAll(rdir)
		return nil, fmt.Errorf("redis-server: %w", err)
	}
	pdir, err := os.MkdirTemp("", "tidemark-bench-"+name+"-pg-")
	if err != nil {
		s.Stop()
		return nil, err
	}
	if s.Postgres, err = localserver.NewPostgres(localserver.PostgresConfig{Dir: pdir, Ephemeral: true}); err != nil {
		os.RemoveAll(pdir)
		s.Stop()
		return nil, fmt.Errorf("postgres: %w", err)
	}
	s.DSN = s.Postgres.DSN("postgres")
	if _, err := migrations.Up(ctx, s.DSN, log); err != nil {
		s.Stop()
		return nil, fmt.Errorf("migrate: %w", err)
	}
	if s.Pool, err = pgxpool.New(ctx, s.DSN); err != nil {
		s.Stop()
		return nil, err
	}
	if _, err := s.Pool.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		s.Stop()
		return nil, fmt.Errorf("pg_stat_statements: %w", err)
	}
	return s, nil
}

// Stop stops the servers and removes their files.
func (s *Stack) Stop() {
	if s.Pool != nil {
		s.Pool.Close()
	}
	if s.Postgres != nil {
		s.Postgres.Remove()
	}
	if s.Redis != nil {
		s.Redis.Remove()
	}
}

// KeepWatermarkCurrent plays a healthy pipeline's applier for namespace ns:
// the freshness watermark follows the clock (every 250 ms, also right after
// the Redis it writes to restarts), so unchanged entries stay servable
// without re-reading the source. It runs until ctx ends; the returned
// function waits for it.
func KeepWatermarkCurrent(ctx context.Context, rdb redis.Cmdable, ns string) (wait func()) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			rdb.HSet(ctx, schema.WatermarkKey(ns), schema.FieldPartitions, 1, schema.WatermarkField(0), time.Now().UnixMilli())
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return wg.Wait
}

// Serve is one `tidemark serve` process.
type Serve struct {
	p       *proc.Process
	API     string // http://host:port of the API
	Metrics string // http://host:port of /metrics, /readyz, /healthz
}

// StartServe runs `binary --log-level warn serve --pg dsn --redis redisURL
// --namespace ns` on free API and telemetry ports with args appended, and
// waits until its /readyz answers 200. The process dies with the caller.
func StartServe(ctx context.Context, binary, dsn, redisURL, ns string, args ...string) (*Serve, error) {
	return StartServeEnv(ctx, nil, binary, dsn, redisURL, ns, args...)
}

// ProfileEnv and TraceEnv, set for a tidemark process, make it write its
// CPU profile and its execution trace to the files they name (cmd/tidemark
// reads them).
const (
	ProfileEnv = "TIDEMARK_CPU_PROFILE"
	TraceEnv   = "TIDEMARK_TRACE"
)

// StartServeEnv is StartServe with env added to the process's environment
// (e.g. ProfileEnv). The harness's own ProfileEnv and TraceEnv are not
// passed on: a serve process writing the harness's files would garble them.
func StartServeEnv(ctx context.Context, env []string, binary, dsn, redisURL, ns string, args ...string) (*Serve, error) {
	apiPort, err := localserver.FreePort()
	if err != nil {
		return nil, err
	}
	mPort, err := localserver.FreePort()
	if err != nil {
		return nil, err
	}
	all := append([]string{"--log-level", "warn", "serve", "--pg", dsn, "--redis", redisURL, "--namespace", ns,
		"--addr", fmt.Sprintf("127.0.0.1:%d", apiPort), "--metrics-addr", fmt.Sprintf("127.0.0.1:%d", mPort)}, args...)
	env = append([]string{ProfileEnv + "=", TraceEnv + "="}, env...)
	p := &Serve{p: proc.New(proc.Config{Name: "serve", Bin: binary, Args: all, Env: env}),
		API: fmt.Sprintf("http://127.0.0.1:%d", apiPort), Metrics: fmt.Sprintf("http://127.0.0.1:%d", mPort)}
	if err := p.p.Start(); err != nil {
		return nil, err
	}
	if err := p.p.Ready(ctx, p.Metrics, 60*time.Second); err != nil {
		p.Stop()
		return nil, err
	}
	return p, nil
}

// StartServes starts n serve processes as StartServe does; stop ends them.
func StartServes(ctx context.Context, n int, binary, dsn, redisURL, ns string, args ...string) (procs []*Serve, stop func(), err error) {
	stop = func() {
		for _, p := range procs {
			p.Stop()
		}
	}
	for range n {
		p, err := StartServe(ctx, binary, dsn, redisURL, ns, args...)
		if err != nil {
			stop()
			return nil, nil, err
		}
		procs = append(procs, p)
	}
	return procs, stop, nil
}

// Stop ends the process (SIGTERM, a graceful shutdown) and waits for it.
func (p *Serve) Stop() { p.p.Stop(time.Minute) }

// Pid is the serve process's id (0 once it is not running).
func (p *Serve) Pid() int { return p.p.Pid() }

// Counter sums the series of metric name whose line contains match in the
// process's /metrics text; a metric with no such series is an error.
func (p *Serve) Counter(name, match string) (float64, error) {
	res, err := http.Get(p.Metrics + "/metrics")
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return 0, err
	}
	total, found := 0.0, false
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, name) || !strings.Contains(line, match) {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 || (f[0] != name && !strings.HasPrefix(f[0], name+"{")) {
			continue
		}
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, err
		}
		total, found = total+v, true
	}
	if !found {
		return 0, fmt.Errorf("no series %s%s at %s", name, match, p.Metrics)
	}
	return total, nil
}

// SourceReads is the number of single-item source reads (the statements
// tagged "tidemark source read") Postgres has run, from pg_stat_statements.
func SourceReads(ctx context.Context, db *pgxpool.Pool) (int64, error) {
	var n int64
	err := db.QueryRow(ctx, `SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements
		WHERE query LIKE '%tidemark source read%' AND query NOT LIKE '%pg_stat_statements%'`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("pg_stat_statements: %w", err)
	}
	return n, nil
}

// ServeProblems checks the settings a harness hands to `tidemark serve` by
// the api package's own rules, so a harness does not repeat them: set puts
// the harness's values into api.DefaultConfig(), and each problem Validate
// finds in an api field named in fields is added to p under the harness's
// field (fields maps api field to harness field).
func ServeProblems(p *config.Problems, set func(*api.Config), fields map[string]string) {
	c := api.DefaultConfig()
	set(&c)
	for _, fe := range config.Fields(c.Validate()) {
		if name, ok := fields[fe.Field]; ok {
			p.Add(name, "%s", fe.Problem)
		}
	}
}

// Namespace is a fresh cache namespace: prefix and 8 random hex digits, so a
// run (or an arm of one) never reads another's keys on a shared redis-server.
func Namespace(prefix string) string {
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	return prefix + hex.EncodeToString(suffix[:])
}
