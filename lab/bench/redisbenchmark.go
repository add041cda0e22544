package bench

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisBenchmark runs redis-benchmark against one server (or Cluster) and
// remembers the commands it ran, with any password masked, for the report.
type RedisBenchmark struct {
	Path     string   // the redis-benchmark binary ("" = redis-benchmark from PATH)
	Conn     []string // -h host -p port [-a pass] [--dbnum n] [--cluster]
	Commands []string // every command run so far, password masked
}

// RedisBenchmarkAt targets a standalone server at host:port.
func RedisBenchmarkAt(path, addr string) (*RedisBenchmark, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("bench: redis address %q: %w", addr, err)
	}
	return &RedisBenchmark{Path: path, Conn: []string{"-h", host, "-p", port}}, nil
}

// RedisBenchmarkFor targets the server (or Cluster) rdb talks to, with its
// password and database.
func RedisBenchmarkFor(path string, rdb redis.UniversalClient) (*RedisBenchmark, error) {
	var (
		addr, pass string
		db         int
		cluster    bool
	)
	switch r := rdb.(type) {
	case *redis.Client:
		addr, pass, db = r.Options().Addr, r.Options().Password, r.Options().DB
	case *redis.ClusterClient:
		addr, pass, cluster = r.Options().Addrs[0], r.Options().Password, true
	default:
		return nil, fmt.Errorf("bench: unsupported redis client %T", rdb)
	}
	rb, err := RedisBenchmarkAt(path, addr)
	if err != nil {
		return nil, err
	}
	if pass != "" {
		rb.Conn = append(rb.Conn, "-a", pass)
	}
	if db != 0 {
		rb.Conn = append(rb.Conn, "--dbnum", strconv.Itoa(db))
	}
	if cluster {
		rb.Conn = append(rb.Conn, "--cluster")
	}
	return rb, nil
}

// RedisResult is one redis-benchmark test's figures.
type RedisResult struct {
	RPS      float64
	P50, P99 time.Duration
}

// Run runs redis-benchmark --csv with args (options such as -n, -c, -P, then
// -t tests or a command) and returns the last test's figures.
func (rb *RedisBenchmark) Run(ctx context.Context, args ...string) (RedisResult, error) {
	path := rb.Path
	if path == "" {
		path = "redis-benchmark"
	}
	all := append(append(slices.Clone(rb.Conn), "--csv"), args...) // options before the command it benchmarks
	shown := slices.Clone(all)
	if i := slices.Index(shown, "-a"); i >= 0 && i+1 < len(shown) {
		shown[i+1] = "***"
	}
	rb.Commands = append(rb.Commands, path+" "+strings.Join(shown, " "))
	out, err := exec.CommandContext(ctx, path, all...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%w: %s", err, ee.Stderr)
		}
		return RedisResult{}, fmt.Errorf("bench: redis-benchmark %s (installed with redis-server, or apt-get install redis-tools): %w", strings.Join(args, " "), err)
	}
	return ParseRedisBenchmarkCSV(out)
}

// ParseRedisBenchmarkCSV reads redis-benchmark --csv output: a header, then
// one line per test with "rps" and "p50_latency_ms"/"p99_latency_ms" columns.
// It returns the last line's figures.
func ParseRedisBenchmarkCSV(out []byte) (RedisResult, error) {
	recs, err := csv.NewReader(strings.NewReader(string(out))).ReadAll()
	if err != nil || len(recs) < 2 {
		return RedisResult{}, fmt.Errorf("bench: unreadable redis-benchmark output %q: %v", out, err)
	}
	col := map[string]int{}
	for i, h := range recs[0] {
		col[h] = i
	}
	rec := recs[len(recs)-1]
	num := func(name string) (float64, error) {
		i, ok := col[name]
		if !ok || i >= len(rec) {
			return 0, fmt.Errorf("bench: redis-benchmark output has no %s column: %q", name, out)
		}
		v, err := strconv.ParseFloat(rec[i], 64)
		if err != nil {
			return 0, fmt.Errorf("bench: redis-benchmark %s %q: %w", name, rec[i], err)
		}
		return v, nil
	}
	var r RedisResult
	var ms float64
	if r.RPS, err = num("rps"); err != nil {
		return r, err
	}
	if ms, err = num("p50_latency_ms"); err != nil {
		return r, err
	}
	r.P50 = time.Duration(ms * float64(time.Millisecond))
	if ms, err = num("p99_latency_ms"); err != nil {
		return r, err
	}
	r.P99 = time.Duration(ms * float64(time.Millisecond))
	return r, nil
}

// InfoField is field name of a Redis INFO reply ("" if absent).
func InfoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

// RedactURL hides the password of a URL for reports.
func RedactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	return u.Redacted()
}
