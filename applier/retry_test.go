package applier

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/schema"
)

// replyErr is an error reply as go-redis returns it (a redis.Error).
type replyErr string

func (e replyErr) Error() string { return string(e) }
func (replyErr) RedisError()     {}

// Every error prefix Redis 7 replies with, and what it means for a record:
// only an error about the key's own data is not retried (the key is purged
// instead); everything else, including an error nobody knows yet, holds
// the partition and retries.
func TestClassifyEveryRedisErrorPrefix(t *testing.T) {
	for _, tc := range []struct {
		reply string
		want  errClass
	}{
		{"WRONGTYPE Operation against a key holding the wrong kind of value", classKey},
		{"ERR user_script:12: attempt to compare nil with number script: 0a1b, on @user_script:12.", classKey},
		{"ERR Error running script (call to f_0a1b): @user_script:12: attempt to compare nil with number", classKey},
		{"ERR max number of clients reached", classRetry},
		{"ERR unknown command 'EVALSHA'", classRetry},
		{"ERR wrong number of arguments for 'evalsha' command", classRetry},
		{"NOSCRIPT No matching script. Please use EVAL.", classRetry},
		{"BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.", classRetry},
		{"BUSYKEY Target key name already exists.", classRetry},
		{"BUSYGROUP Consumer Group name already exists", classRetry},
		{"LOADING Redis is loading the dataset in memory", classRetry},
		{"READONLY You can't write against a read only replica.", classRetry},
		{"MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.", classRetry},
		{"MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk.", classRetry},
		{"NOREPLICAS Not enough good replicas to write.", classRetry},
		{"OOM command not allowed when used memory > 'maxmemory'.", classRetry},
		{"EXECABORT Transaction discarded because of previous errors.", classRetry},
		{"NOAUTH Authentication required.", classRetry},
		{"WRONGPASS invalid username-password pair or user is disabled.", classRetry},
		{"NOPERM this user has no permissions to run the 'evalsha' command", classRetry},
		{"NOPROTO unsupported protocol version", classRetry},
		{"CLUSTERDOWN The cluster is down", classRetry},
		{"CLUSTERDOWN Hash slot not served", classRetry},
		{"TRYAGAIN Multiple keys request during rehashing of slot", classRetry},
		{"CROSSSLOT Keys in request don't hash to the same slot", classRetry},
		{"MOVED 3999 127.0.0.1:6381", classRetry},
		{"ASK 3999 127.0.0.1:6381", classRetry},
		{"UNBLOCKED client unblocked via CLIENT UNBLOCK", classRetry},
		{"UNKILLABLE Sorry the script already executed write commands against the dataset.", classRetry},
		{"NOTBUSY No scripts in execution right now.", classRetry},
		{"NOGROUP No such key or consumer group", classRetry},
		{"DENIED Redis is running in protected mode", classRetry},
		{"IOERR error writing to the AOF", classRetry},
		{"SOMENEWCODE an error this code has never seen", classRetry},
	} {
		if got := classify(fmt.Errorf("cache: invalidate: %w", replyErr(tc.reply))); got != tc.want {
			t.Errorf("%q: %s, want %s", tc.reply, got, tc.want)
		}
	}
	for _, err := range []error{io.EOF, &net.OpError{Op: "dial", Err: errors.New("connection refused")}, context.DeadlineExceeded, errors.New("anything")} {
		if got := classify(err); got != classRetry {
			t.Errorf("%v: %s, want retry", err, got)
		}
	}
}

// The replies a real Redis gives the invalidation script while it refuses
// writes are classified as retry, and a wrong-typed key as key.
func TestClassifyRealRedisReplies(t *testing.T) {
	rs := testenv.StartRedis(t)
	rdb := rs.Client(t)
	cc, err := cache.New(cache.DefaultConfig(), cache.Deps{Redis: rdb, Log: testenv.Logger(t), Registerer: nil})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testenv.Context(t, 30*time.Second)
	if err := rdb.Set(ctx, schema.RedisKey(testNS, "t1", "wrongtype"), "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	outcome := func() error {
		t.Helper()
		out, err := cc.InvalidateBatch(ctx, []cache.Invalidation{{Tenant: "t1", Item: "a", Version: 7}})
		if err != nil {
			return err
		}
		return out[0].Err
	}
	if out, err := cc.InvalidateBatch(ctx, []cache.Invalidation{{Tenant: "t1", Item: "wrongtype", Version: 1}}); err != nil || classify(out[0].Err) != classKey {
		t.Fatalf("wrong-typed key: %v %+v, want a key error", err, out)
	}
	for _, f := range refusals {
		t.Run(f.name, func(t *testing.T) {
			f.begin(t, rdb)
			err := outcome()
			f.end(t, rdb)
			if err == nil || !strings.Contains(err.Error(), f.name) || classify(err) != classRetry {
				t.Fatalf("refused write: %v (%s), want a %s retry error", err, classify(err), f.name)
			}
		})
	}
}
