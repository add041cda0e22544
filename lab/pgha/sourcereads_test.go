package pgha

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/lab/chaos"
)

// sourceReads samples the source's own count of its reads once a second,
// as the chaos run does (lab/chaos/budget.go): pg_stat_statements calls of
// each `tidemark source read: <class>` statement, the auditor's batched
// read by its rows. It connects through the test's DSN, so after a
// promotion it counts on the new primary (whose statistics start empty).
type sourceReads struct {
	mu   sync.Mutex
	secs []chaos.SourceSecond
	done chan struct{}
}

func sampleSourceReads(ctx context.Context, dsn string) *sourceReads {
	s := &sourceReads{done: make(chan struct{})}
	go func() {
		defer close(s.done)
		var conn *pgx.Conn
		defer func() {
			if conn != nil {
				conn.Close(context.Background())
			}
		}()
		var prev map[int64]float64 // statement -> calls (rows for the auditor)
		var prevAt time.Time
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			if conn == nil {
				cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				conn, _ = pgx.Connect(cctx, dsn)
				cancel()
			}
			if conn != nil {
				cur, class, at, err := chaos.SourceStatements(ctx, conn)
				switch {
				case err != nil:
					conn.Close(context.Background())
					conn, prev = nil, nil // a new server: its counts start over
				case prev != nil:
					reads := chaos.ReadsSince(prev, cur, class)
					s.mu.Lock()
					s.secs = append(s.secs, chaos.SourceSecond{At: at, Interval: chaos.Duration(at.Sub(prevAt)), Reads: reads})
					s.mu.Unlock()
					fallthrough
				default:
					prev, prevAt = cur, at
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

// stop ends the sampling and returns every sample.
func (s *sourceReads) stop(cancel context.CancelFunc) []chaos.SourceSecond {
	cancel()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]chaos.SourceSecond(nil), s.secs...)
}

// between sums the samples taken in [from, to] by class, and the busiest
// sample's reads per second.
func between(secs []chaos.SourceSecond, from, to time.Time) (byClass map[string]float64, total, peak float64) {
	byClass = map[string]float64{}
	for _, s := range secs {
		if s.At.Before(from) || s.At.After(to) {
			continue
		}
		var n float64
		for c, r := range s.Reads {
			byClass[c] += r
			n += r
		}
		total += n
		if iv := time.Duration(s.Interval).Seconds(); iv > 0 && n/iv > peak {
			peak = n / iv
		}
	}
	return byClass, total, peak
}
