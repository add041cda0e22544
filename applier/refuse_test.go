package applier

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tidemark/tidemark/lab/testenv"
)

// refusal makes a running redis-server refuse writes while staying up, the
// way production servers do, and undoes it.
type refusal struct {
	name   string // also the error prefix writes get
	start  func(t *testing.T, rdb *redis.Client)
	stop   func(t *testing.T, rdb *redis.Client)
	change bool // undoing it changes the server's identity (master_replid)
}

// refusals are the write refusals reproducible on one local server.
var refusals = []refusal{
	{name: "NOREPLICAS",
		start: func(t *testing.T, rdb *redis.Client) { mustDo(t, rdb, "CONFIG", "SET", "min-replicas-to-write", "1") },
		stop:  func(t *testing.T, rdb *redis.Client) { mustDo(t, rdb, "CONFIG", "SET", "min-replicas-to-write", "0") },
	},
	{name: "OOM",
		start: func(t *testing.T, rdb *redis.Client) {
			mustDo(t, rdb, "CONFIG", "SET", "maxmemory-policy", "noeviction")
			mustDo(t, rdb, "CONFIG", "SET", "maxmemory", "1")
		},
		stop: func(t *testing.T, rdb *redis.Client) { mustDo(t, rdb, "CONFIG", "SET", "maxmemory", "0") },
	},
	{name: "MISCONF",
		// A directory where the snapshot goes makes BGSAVE fail; with a save
		// point configured, Redis then refuses writes.
		start: func(t *testing.T, rdb *redis.Client) {
			dump := dumpPath(t, rdb)
			if err := os.MkdirAll(filepath.Join(dump, "x"), 0o755); err != nil {
				t.Fatal(err)
			}
			mustDo(t, rdb, "CONFIG", "SET", "save", "3600 1")
			mustDo(t, rdb, "CONFIG", "SET", "stop-writes-on-bgsave-error", "yes")
			bgsave(t, rdb)
		},
		stop: func(t *testing.T, rdb *redis.Client) {
			if err := os.RemoveAll(dumpPath(t, rdb)); err != nil {
				t.Fatal(err)
			}
			bgsave(t, rdb)
			mustDo(t, rdb, "CONFIG", "SET", "save", "")
		},
	},
	{name: "READONLY",
		// A replica of a master that does not exist keeps its data and
		// refuses writes; promoting it back gives it a new replication id.
		start: func(t *testing.T, rdb *redis.Client) {
			mustDo(t, rdb, "REPLICAOF", "127.0.0.1", fmt.Sprint(testenv.FreePort(t)))
		},
		stop:   func(t *testing.T, rdb *redis.Client) { mustDo(t, rdb, "REPLICAOF", "NO", "ONE") },
		change: true,
	},
	{name: "BUSY",
		// A script that runs past busy-reply-threshold: every other command
		// gets BUSY until SCRIPT KILL.
		start: func(t *testing.T, rdb *redis.Client) {
			mustDo(t, rdb, "CONFIG", "SET", "busy-reply-threshold", "50")
			busy := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr, ReadTimeout: -1})
			t.Cleanup(func() { busy.Close() })
			go busy.Eval(context.Background(), `local s = tonumber(redis.call('TIME')[1])
				while tonumber(redis.call('TIME')[1]) - s < 120 do end return 1`, nil)
		},
		stop: func(t *testing.T, rdb *redis.Client) {
			testenv.Eventually(t, 10*time.Second, "script killed", func() error {
				if err := rdb.Do(context.Background(), "SCRIPT", "KILL").Err(); err != nil && !strings.HasPrefix(err.Error(), "NOTBUSY") {
					return err
				}
				return rdb.Ping(context.Background()).Err()
			})
		},
	},
}

// begin starts f and waits until a write is refused with its prefix.
func (f refusal) begin(t *testing.T, rdb *redis.Client) {
	t.Helper()
	f.start(t, rdb)
	testenv.Eventually(t, 10*time.Second, f.name+" refuses writes", func() error {
		err := rdb.Set(context.Background(), "refusal-probe", "1", 0).Err()
		if err == nil || !strings.HasPrefix(err.Error(), f.name) {
			return fmt.Errorf("SET answered %v", err)
		}
		return nil
	})
}

// end undoes f and waits until writes work.
func (f refusal) end(t *testing.T, rdb *redis.Client) {
	t.Helper()
	f.stop(t, rdb)
	testenv.Eventually(t, 10*time.Second, f.name+" lifted", func() error {
		return rdb.Set(context.Background(), "refusal-probe", "1", 0).Err()
	})
	rdb.Del(context.Background(), "refusal-probe")
}

func mustDo(t *testing.T, rdb *redis.Client, args ...any) {
	t.Helper()
	if err := rdb.Do(context.Background(), args...).Err(); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
}

func dumpPath(t *testing.T, rdb *redis.Client) string {
	t.Helper()
	cfg, err := rdb.ConfigGet(context.Background(), "dir").Result()
	if err != nil || cfg["dir"] == "" {
		t.Fatalf("CONFIG GET dir: %v %v", cfg, err)
	}
	return filepath.Join(cfg["dir"], "dump.rdb")
}

// bgsave runs BGSAVE and waits for it to finish (whatever its result).
func bgsave(t *testing.T, rdb *redis.Client) {
	t.Helper()
	ctx := context.Background()
	testenv.Eventually(t, 10*time.Second, "BGSAVE started", func() error { return rdb.BgSave(ctx).Err() })
	testenv.Eventually(t, 10*time.Second, "BGSAVE finished", func() error {
		info, err := rdb.Info(ctx, "persistence").Result()
		if err != nil {
			return err
		}
		if strings.Contains(info, "rdb_bgsave_in_progress:1") {
			return fmt.Errorf("in progress")
		}
		return nil
	})
}
