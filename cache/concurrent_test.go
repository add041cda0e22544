package cache_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark/tidemark/cache"
)

// source models the catalog rows behind a few keys, and records what the
// cache did so the invariants can be checked afterwards.
type source struct {
	mu   sync.Mutex
	keys map[string]*modelKey
}

type modelKey struct {
	version int64       // committed source version
	applied int64       // highest invalidation whose Invalidate returned: the floor is at least this
	issued  []issuedTok // lease tokens handed out
	filled  map[cache.Token]time.Time
	invals  []span // every Invalidate call on the key
}

type span struct{ start, end time.Time }

type issuedTok struct {
	tok cache.Token
	span
}

func (s *source) key(item string) *modelKey { return s.keys[item] }

// Many goroutines look up, fill (sometimes slowly, past the lease, or with an
// old observation) and invalidate (late, out of order, duplicated) a few
// keys. Checked: no hit below the floor, no fill below the floor, nothing
// served at or after its hard deadline, deadlines inherited from the fill's
// observation, and never two active lease tokens for one key.
func TestConcurrentModel(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		cfg := testConfig()
		cfg.Lease = 150 * time.Millisecond
		cfg.HardLifetime = 600 * time.Millisecond
		cfg.SoftMin, cfg.SoftMax = 100*time.Millisecond, 200*time.Millisecond
		c, tn := newClient(t, b, cfg), tenant(t)
		items := []string{"a", "b", "c", "d"}
		src := &source{keys: map[string]*modelKey{}}
		for _, it := range items {
			src.keys[it] = &modelKey{filled: map[cache.Token]time.Time{}}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		var (
			wg                           sync.WaitGroup
			hits, stales, fills, rejects atomic.Int64
			violations                   atomic.Int64
		)
		fail := func(format string, a ...any) {
			if violations.Add(1) <= 10 {
				t.Errorf(format, a...)
			}
		}

		invalidate := func(item string, v int64) {
			k := src.key(item)
			start := time.Now()
			_, err := c.Invalidate(context.Background(), tn, item, v)
			end := time.Now()
			if err != nil {
				fail("invalidate: %v", err)
				return
			}
			src.mu.Lock()
			k.invals = append(k.invals, span{start, end})
			k.applied = max(k.applied, v)
			src.mu.Unlock()
		}
		// Writers commit new versions; the invalidation arrives now, late
		// (reordered with later ones), or twice.
		for w := 0; w < 2; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					item := items[rand.IntN(len(items))]
					src.mu.Lock()
					k := src.key(item)
					k.version++
					v := k.version
					src.mu.Unlock()
					switch rand.IntN(4) {
					case 0:
						wg.Add(1)
						go func() {
							defer wg.Done()
							time.Sleep(time.Duration(rand.IntN(40)) * time.Millisecond)
							invalidate(item, v)
						}()
					case 1:
						invalidate(item, v)
						invalidate(item, v)
					default:
						invalidate(item, v)
					}
					time.Sleep(time.Duration(5+rand.IntN(30)) * time.Millisecond)
				}
			}()
		}
		// Readers.
		for r := 0; r < 8; r++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					item := items[rand.IntN(len(items))]
					k := src.key(item)
					src.mu.Lock()
					floor, minv, preV := k.applied, int64(0), k.version
					if rand.IntN(10) == 0 { // an admin read after its own update
						minv = k.applied
					}
					src.mu.Unlock()
					// Some callers read the source before asking for a
					// lease (a read already in flight): their version may
					// be below the floor by the time they fill.
					preObs, pre := time.Now(), rand.IntN(5) == 0
					if pre {
						time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
					}
					before := time.Now()
					res, err := c.Lookup(context.Background(), tn, item, minv)
					after := time.Now()
					if err != nil {
						fail("lookup: %v", err)
						return
					}
					switch res.Status {
					case cache.StatusHit, cache.StatusStale:
						e := res.Entry
						if res.Status == cache.StatusHit {
							hits.Add(1)
							if e.Version < floor {
								fail("hit v%d below floor %d", e.Version, floor)
							}
						} else {
							stales.Add(1)
						}
						if e.Version < minv {
							fail("%s v%d below min_version %d", res.Status, e.Version, minv)
						}
						if !before.Before(e.Hard) {
							fail("%s served at %v, hard %v", res.Status, before, e.Hard)
						}
						if !e.Hard.Equal(e.Obs.Add(cfg.HardLifetime)) {
							fail("hard %v not inherited from obs %v", e.Hard, e.Obs)
						}
						if string(e.Payload) != string(payload(e.Version)) {
							fail("payload %q for v%d", e.Payload, e.Version)
						}
					case cache.StatusWait:
						time.Sleep(time.Duration(1+rand.IntN(5)) * time.Millisecond)
					}
					if res.Token.IsZero() {
						continue
					}
					src.mu.Lock()
					k.issued = append(k.issued, issuedTok{res.Token, span{before, after}})
					src.mu.Unlock()

					// Read the source, sometimes slowly or past the lease,
					// sometimes reusing an old observation.
					obs := time.Now()
					src.mu.Lock()
					v := k.version
					src.mu.Unlock()
					if pre {
						obs, v = preObs, preV
					} else if rand.IntN(4) == 0 {
						obs = obs.Add(-time.Duration(rand.IntN(int(cfg.HardLifetime.Milliseconds()))) * time.Millisecond)
					}
					switch rand.IntN(10) {
					case 0, 1: // the holder crashed
						continue
					case 2:
						time.Sleep(cfg.Lease + 20*time.Millisecond)
					default:
						time.Sleep(time.Duration(rand.IntN(15)) * time.Millisecond)
					}
					src.mu.Lock()
					floor = k.applied
					src.mu.Unlock()
					start := time.Now()
					err = c.Fill(context.Background(), tn, item, res.Token, v, payload(v), obs)
					var rej *cache.RejectedError
					switch {
					case err == nil:
						fills.Add(1)
						if v < floor {
							fail("fill of v%d below floor %d accepted", v, floor)
						}
						src.mu.Lock()
						k.filled[res.Token] = start
						src.mu.Unlock()
						if rand.IntN(4) == 0 { // a retried fill after a lost reply
							if err := c.Fill(context.Background(), tn, item, res.Token, v, payload(v), obs); !errors.As(err, &rej) {
								fail("second fill with a used token: %v", err)
							}
						}
					case errors.As(err, &rej):
						rejects.Add(1)
					default:
						fail("fill: %v", err)
					}
				}
			}()
		}
		wg.Wait()

		// Two tokens of one key were active at once if the second was
		// surely issued after the first (its lookup began after the
		// first's returned) and surely before the first could have
		// ended: its lease ran out, its fill, or an invalidation.
		for item, k := range src.keys {
			for i, t1 := range k.issued {
				end := t1.start.Add(cfg.Lease - 2*time.Millisecond)
				if f, ok := k.filled[t1.tok]; ok && f.Before(end) {
					end = f
				}
				for _, inv := range k.invals {
					if inv.end.After(t1.start) && inv.start.Before(end) {
						end = inv.start
					}
				}
				for j, t2 := range k.issued {
					if i != j && t1.end.Before(t2.start) && t2.end.Before(end) {
						fail("key %s: token %d issued at %v while token %d (issued %v) was active", item, j, t2.start, i, t1.start)
					}
				}
			}
		}
		t.Logf("hits %d, stale %d, fills %d, rejected fills %d", hits.Load(), stales.Load(), fills.Load(), rejects.Load())
		if hits.Load() == 0 || fills.Load() == 0 || rejects.Load() == 0 || stales.Load() == 0 {
			t.Errorf("the run did not exercise every path")
		}
	})
}
