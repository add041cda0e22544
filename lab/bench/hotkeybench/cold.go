package hotkeybench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/lab/bench"
	"github.com/tidemark/tidemark/lab/localserver"
	"github.com/tidemark/tidemark/lab/seed"
	"github.com/tidemark/tidemark/migrations"
	"github.com/tidemark/tidemark/schema"
)

// The from-cold phase: hot-key detection as an operator meets it. Serve
// processes run with the product defaults but L1 off, --hot-threshold and
// --hot-replicas; one item nobody has read is then read through them at
// ColdFactor x the threshold, and the phase times, from the first read,
// when the item's replica manifest is published and when serve first
// answers a read from a copy.

// coldRound is one item read from cold.
type coldRound struct {
	offered, achieved float64       // reads/s
	published         time.Duration // first read -> manifest in the primary entry; <0: not within ColdLimit
	served            time.Duration // first read -> serve's first read from a copy; <0: not within ColdLimit
}

// coldLimit bounds a round: far beyond the goal, short of the slow set's
// minute.
const coldLimit = 30 * time.Second

// ColdGoal is the time from a key turning hot at 10x the threshold to its
// copies serving it.
const ColdGoal = 5 * time.Second

func runCold(ctx context.Context, cfg Config, url string, rdb *redis.ClusterClient) ([]coldRound, error) {
	dir, err := os.MkdirTemp("", "tidemark-bench-hotkey-pg-")
	if err != nil {
		return nil, err
	}
	pg, err := localserver.NewPostgres(localserver.PostgresConfig{Dir: dir, Ephemeral: true})
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("postgres: %w", err)
	}
	defer pg.Remove()
	dsn := pg.DSN("postgres")
	if _, err := migrations.Up(ctx, dsn, slog.New(slog.DiscardHandler)); err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	tenant := "bench"
	key, err := bench.SeedTenant(ctx, dsn, seed.Items{Tenant: tenant, Prefix: "flash-sale-", Count: cfg.ColdRounds,
		Display: "jsonb_build_object('name', 'Flash sale ' || n)"})
	if err != nil {
		return nil, err
	}
	ns := bench.Namespace("benchcold")
	wctx, stopWM := context.WithCancel(ctx)
	defer bench.KeepWatermarkCurrent(wctx, rdb, ns)()
	defer stopWM()
	procs, stop, err := bench.StartServes(ctx, cfg.Processes, cfg.Binary, dsn, url, ns,
		"--l1-ttl", "0", "--hot-threshold", strconv.FormatFloat(cfg.ColdThreshold, 'f', -1, 64), "--hot-replicas", strconv.Itoa(cfg.Replicas))
	if err != nil {
		return nil, err
	}
	defer stop()
	client := &http.Client{Transport: &http.Transport{MaxIdleConns: 1024, MaxIdleConnsPerHost: 1024}, Timeout: 5 * time.Second}
	var rounds []coldRound
	for i := range cfg.ColdRounds {
		r, err := coldOnce(ctx, cfg, client, key, procs, rdb, schema.RedisKey(ns, tenant, coldItem(i)), coldItem(i))
		if err != nil {
			return nil, fmt.Errorf("round %d: %w", i+1, err)
		}
		rounds = append(rounds, r)
	}
	return rounds, nil
}

func coldItem(i int) string { return "flash-sale-" + strconv.Itoa(i) }

// coldOnce reads one cold item at ColdFactor x the threshold, spread over
// the serve processes, until a copy has served it (or coldLimit).
func coldOnce(ctx context.Context, cfg Config, client *http.Client, apiKey string, procs []*bench.Serve,
	rdb *redis.ClusterClient, redisKey, item string) (coldRound, error) {
	r := coldRound{offered: cfg.ColdFactor * cfg.ColdThreshold, published: -1, served: -1}
	copiesBefore, err := copyReads(procs)
	if err != nil {
		return r, err
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var sent, failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	workers := cfg.Workers
	every := time.Duration(float64(workers) / r.offered * float64(time.Second))
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			url := procs[w%len(procs)].API + "/v1/catalog/items/" + item
			next := start.Add(time.Duration(w) * every / time.Duration(workers))
			for rctx.Err() == nil {
				if d := time.Until(next); d > 0 {
					time.Sleep(d)
				}
				if next = next.Add(every); next.Before(time.Now()) {
					next = time.Now() // late: send now, never a burst to catch up
				}
				req, _ := http.NewRequestWithContext(rctx, "GET", url, nil)
				req.Header.Set("Authorization", "Bearer "+apiKey)
				res, err := client.Do(req)
				sent.Add(1)
				if err != nil {
					if rctx.Err() == nil {
						failed.Add(1)
						firstErr.CompareAndSwap(nil, err.Error())
					}
					continue
				}
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != http.StatusOK {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, "status "+res.Status)
				}
			}
		}()
	}
	defer wg.Wait()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for r.served < 0 && time.Since(start) < coldLimit {
		select {
		case <-ctx.Done():
			return r, ctx.Err()
		case <-tick.C:
		}
		if r.published < 0 {
			m, err := rdb.HGet(ctx, redisKey, cache.FieldReplicas).Result()
			if err != nil && !errors.Is(err, redis.Nil) {
				return r, err
			}
			if m != "" {
				r.published = time.Since(start)
			}
		}
		if r.published >= 0 {
			n, err := copyReads(procs)
			if err != nil {
				return r, err
			}
			if n > copiesBefore {
				r.served = time.Since(start)
			}
		}
	}
	elapsed := time.Since(start)
	cancel()
	r.achieved = float64(sent.Load()) / elapsed.Seconds()
	if f := failed.Load(); f > sent.Load()/100 {
		return r, fmt.Errorf("%d of %d reads of %s failed (first: %v)", f, sent.Load(), item, firstErr.Load())
	}
	return r, nil
}

// copyReads is serve's count of reads answered from a hot key's copy, over
// every process.
func copyReads(procs []*bench.Serve) (float64, error) {
	var sum float64
	for _, p := range procs {
		n, err := p.Counter("tidemark_replica_reads_total", `result="copy"`)
		if err != nil {
			return 0, err
		}
		sum += n
	}
	return sum, nil
}

func reportCold(w io.Writer, cfg Config, rounds []coldRound) {
	fmt.Fprintf(w, "\n### From cold through serve\n\n%d `tidemark serve` processes, product defaults with `--l1-ttl 0 --hot-threshold %g --hot-replicas %d`; each round reads an item nobody has read at %gx the threshold (%d readers) and times, from its first read, the replica manifest's publication and serve's first read from a copy.\n\n",
		cfg.Processes, cfg.ColdThreshold, cfg.Replicas, cfg.ColdFactor, cfg.Workers)
	t := bench.Table{Header: []string{"round", "offered reads/s", "achieved", "manifest published", "first read from a copy"}}
	var served []float64
	missed := 0
	for i, r := range rounds {
		t.Add(strconv.Itoa(i+1), fmt.Sprintf("%.0f", r.offered), fmt.Sprintf("%.0f", r.achieved), coldTime(r.published), coldTime(r.served))
		if r.served < 0 {
			missed++
		} else {
			served = append(served, r.served.Seconds())
		}
	}
	t.WriteTo(w)
	verdict := "met"
	med := "-"
	if missed > 0 {
		verdict = fmt.Sprintf("NOT met (%d rounds without a copy read within %s)", missed, coldLimit)
	} else {
		m := bench.Median(served)
		med = fmt.Sprintf("%.2f s", m)
		if time.Duration(m*float64(time.Second)) > ColdGoal {
			verdict = "NOT met"
		}
	}
	fmt.Fprintf(w, "\nGoal: a key at %gx the threshold served from copies within %s with the defaults: median %s (%s).\n", cfg.ColdFactor, ColdGoal, med, verdict)
}

func coldTime(d time.Duration) string {
	if d < 0 {
		return "not within " + coldLimit.String()
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}
