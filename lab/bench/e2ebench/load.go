package e2ebench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidemark/tidemark/lab/seed"

	"github.com/jackc/pgx/v5/pgxpool"
)

// itemID names row i of a phase's tenant.
func itemID(i int) string { return fmt.Sprintf("i%07d", i) }

// seedTenant inserts keys rows (version 1) for tenant.
func seedTenant(ctx context.Context, pool *pgxpool.Pool, tenant string, keys int) error {
	// itemID's shape: "i" and seven digits.
	if err := (seed.Items{Tenant: tenant, Prefix: "i", Pad: 7, Count: keys, Batch: 50_000}).Insert(ctx, pool); err != nil {
		return fmt.Errorf("bench e2e: %w", err)
	}
	return nil
}

// load is a paced writer: transaction j updates rows j*rows .. j*rows+rows-1
// (mod keys) of tenant, each its own autocommit transaction, started on
// schedule by a pool of connections so a slow commit does not delay the next.
type load struct {
	pool    *pgxpool.Pool
	tenant  string
	keys    int
	rows    int
	txRate  float64
	workers int

	every            int    // rows whose number is a multiple of every are observed
	pgbench, dsn     string // pgbench.go: the load through pgbench when pgbench is set
	commits, changes atomic.Int64
	observed         atomic.Int64
}

type loadResult struct {
	Commits, Changes int64
	Observed         int64 // changes to rows the bench times (see Config.ObserveEvery)
	Elapsed          time.Duration
	Late             int64         // transactions started more than 100 ms after their slot (-1: unknown, pgbench)
	Lag              string        // pgbench's schedule lag, in place of Late
	CPU              time.Duration // the load generator's CPU when it is its own process (pgbench)
}

func (l *load) run(ctx context.Context, d time.Duration) (loadResult, error) {
	if l.pgbench != "" {
		return l.runPgbench(ctx, d)
	}
	type job struct {
		n   int
		due time.Time
	}
	jobs := make(chan job, 1<<16)
	var (
		wg      sync.WaitGroup
		errOnce sync.Once
		firstEr error
		late    atomic.Int64
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range l.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			items := make([]string, l.rows)
			for j := range jobs {
				if time.Since(j.due) > 100*time.Millisecond {
					late.Add(1)
				}
				observed := 0
				for r := range items {
					n := (j.n*l.rows + r) % l.keys
					items[r] = itemID(n)
					if l.every > 0 && n%l.every == 0 {
						observed++
					}
				}
				var err error
				if l.rows == 1 {
					_, err = l.pool.Exec(ctx, "UPDATE catalog.items SET version = version + 1 WHERE tenant_id = $1 AND item_id = $2", l.tenant, items[0])
				} else {
					_, err = l.pool.Exec(ctx, "UPDATE catalog.items SET version = version + 1 WHERE tenant_id = $1 AND item_id = ANY($2)", l.tenant, items)
				}
				if err != nil {
					errOnce.Do(func() { firstEr = fmt.Errorf("bench e2e: load: %w", err); cancel() })
					continue
				}
				l.commits.Add(1)
				l.changes.Add(int64(l.rows))
				l.observed.Add(int64(observed))
			}
		}()
	}
	began := time.Now()
	interval := time.Duration(float64(time.Second) / l.txRate)
	t := time.NewTicker(time.Millisecond)
	sent := 0
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case now := <-t.C:
			el := now.Sub(began)
			if el >= d {
				break loop
			}
			for due := int(el / interval); sent <= due; sent++ {
				select {
				case jobs <- job{n: sent, due: began.Add(time.Duration(sent) * interval)}:
				case <-ctx.Done():
					break loop
				}
			}
		}
	}
	t.Stop()
	close(jobs)
	wg.Wait()
	res := loadResult{Commits: l.commits.Load(), Changes: l.changes.Load(), Observed: l.observed.Load(), Elapsed: time.Since(began), Late: late.Load()}
	if firstEr != nil {
		return res, firstEr
	}
	return res, ctx.Err()
}
