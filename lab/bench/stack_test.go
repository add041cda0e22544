package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"tidemark/lab/testenv"
	"tidemark/schema"
)

// The stack the serve-process harnesses share: a migrated Postgres that
// counts statements, a redis-server the watermark keeper writes to, and
// nothing left on disk after Stop.
func TestStackStartsMigratedServersAndCleansUp(t *testing.T) {
	ctx := context.Background()
	s, err := StartStack(ctx, "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			s.Stop()
		}
	}()
	pool := s.Pool
	if _, err := pool.Exec(ctx, `INSERT INTO catalog.items (tenant_id, item_id, version, display) VALUES ('t', 'i', 1, '{}')`); err != nil {
		t.Fatalf("the schema is not migrated: %v", err)
	}
	if _, err := pool.Exec(ctx, `SELECT /* tidemark source read */ display FROM catalog.items WHERE tenant_id = 't'`); err != nil {
		t.Fatal(err)
	}
	if n, err := SourceReads(ctx, pool); err != nil || n != 1 {
		t.Fatalf("SourceReads = %d, %v; want 1", n, err)
	}

	rdb := redis.NewClient(&redis.Options{Addr: s.Redis.Addr})
	defer rdb.Close()
	kctx, cancel := context.WithCancel(ctx)
	wait := KeepWatermarkCurrent(kctx, rdb, "ns")
	testenv.Eventually(t, 10*time.Second, "the watermark follows the clock", func() error {
		v, err := rdb.HGet(ctx, schema.WatermarkKey("ns"), schema.WatermarkField(0)).Result()
		if err != nil {
			return err
		}
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return err
		}
		if age := time.Since(time.UnixMilli(ms)); age > 2*time.Second {
			return fmt.Errorf("watermark %s old", age)
		}
		return nil
	})
	cancel()
	wait()

	pgDir, redisDir := s.Postgres.Dir, s.Redis.Dir()
	s.Stop()
	stopped = true
	for _, d := range []string{pgDir, redisDir} {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("%s is left after Stop (%v)", d, err)
		}
	}
}
