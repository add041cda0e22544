package cache_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/lab/localserver"
	"github.com/tidemark/tidemark/lab/testenv"
)

// Through a Sentinel (one master, one replica), invalidations keep being
// applied across a Sentinel failover: the client follows the new master,
// and every key's floor ends at the last version sent to it.
func TestSentinelFailoverLosesNoInvalidation(t *testing.T) {
	dir := t.TempDir()
	master, err := localserver.NewRedis(localserver.RedisConfig{Dir: filepath.Join(dir, "m")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(master.Remove)
	replica, err := localserver.NewRedis(localserver.RedisConfig{Dir: filepath.Join(dir, "r"), ReplicaOf: master.Addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(replica.Remove)
	ctx := testenv.Context(t, 2*time.Minute)
	testenv.Eventually(t, 30*time.Second, "replica in sync", func() error {
		info, err := redis.NewClient(&redis.Options{Addr: replica.Addr}).Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		if !containsLine(info, "master_link_status:up") {
			return errors.New("master link not up")
		}
		return nil
	})
	sen, err := localserver.NewSentinel(filepath.Join(dir, "s"), "tm", master.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sen.Stop)

	rdb, err := cache.OpenRedis(cache.RedisConfig{URL: "redis+sentinel://" + sen.Addr + "/tm", Mode: cache.ModeAuto}, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	if _, ok := rdb.(*redis.Client); !ok {
		t.Fatalf("redis+sentinel:// gave a %T, want the failover client", rdb)
	}
	c, err := cache.New(cache.DefaultConfig(), cache.Deps{Redis: rdb, Log: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	const keys = 50
	var sent, retries atomic.Int64
	last := make([]int64, keys)
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		for v := int64(1); ; v++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			batch := make([]cache.Invalidation, keys)
			for i := range batch {
				batch[i] = cache.Invalidation{Tenant: "acme", Item: fmt.Sprintf("i%d", i), Version: v}
			}
			// An error means the batch may or may not be applied: send it
			// again until it is acknowledged, as the applier does.
			for {
				_, err := c.InvalidateBatch(ctx, batch)
				if err == nil {
					break
				}
				if ctx.Err() != nil {
					done <- err
					return
				}
				retries.Add(1)
				time.Sleep(20 * time.Millisecond)
			}
			for i := range last {
				last[i] = v
			}
			sent.Add(1)
		}
	}()
	testenv.Eventually(t, 30*time.Second, "invalidations before the failover", func() error {
		if sent.Load() < 20 {
			return fmt.Errorf("%d batches", sent.Load())
		}
		return nil
	})
	before := sent.Load()
	start := time.Now()
	sc := redis.NewSentinelClient(&redis.Options{Addr: sen.Addr})
	defer sc.Close()
	if err := sc.Failover(ctx, "tm").Err(); err != nil {
		t.Fatalf("SENTINEL FAILOVER: %v", err)
	}
	testenv.Eventually(t, 60*time.Second, "sentinel names the replica as master", func() error {
		a, err := sc.GetMasterAddrByName(ctx, "tm").Result()
		if err != nil {
			return err
		}
		if a[0]+":"+a[1] != replica.Addr {
			return fmt.Errorf("master is %v, want %s", a, replica.Addr)
		}
		return nil
	})
	// Until Sentinel has made the old master a replica, it still takes
	// writes, and a client that has not yet followed the switch writes
	// there: those are lost when it resyncs from the new master (the
	// applier covers that window with its failover reset, see
	// applier/failover.go). From then on every write reaches the new
	// master, so the batches after it must end every key at its last
	// version.
	testenv.Eventually(t, 60*time.Second, "the old master is a replica", func() error {
		info, err := redis.NewClient(&redis.Options{Addr: master.Addr}).Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		if !containsLine(info, "role:slave") {
			return errors.New("old master still has role master")
		}
		return nil
	})
	demoted := sent.Load()
	testenv.Eventually(t, 60*time.Second, "invalidations after the failover", func() error {
		if sent.Load() < demoted+20 {
			return fmt.Errorf("%d batches after the old master became a replica", sent.Load()-demoted)
		}
		return nil
	})
	switched := time.Since(start)
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for i, v := range last {
		f, err := c.Floor(ctx, "acme", fmt.Sprintf("i%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if f != v {
			t.Fatalf("key i%d: floor %d after the failover, want %d (an invalidation was lost)", i, f, v)
		}
	}
	t.Logf("sentinel failover: %d batches of %d invalidations (%d before the failover), %d retried calls, new master serving within %s, no invalidation lost",
		sent.Load(), keys, before, retries.Load(), switched.Round(time.Millisecond))
}

func containsLine(s, line string) bool {
	for _, l := range splitLines(s) {
		if l == line {
			return true
		}
	}
	return false
}

func splitLines(s string) []string {
	var out []string
	cur := ""
	for _, r := range s {
		switch r {
		case '\r':
		case '\n':
			out = append(out, cur)
			cur = ""
		default:
			cur += string(r)
		}
	}
	return append(out, cur)
}
