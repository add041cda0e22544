package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/schema"
)

// The stack the serve-process harnesses share: a migrated Postgres that
// counts statements, a redis-server the watermark keeper writes to, a serve
// process on them that writes the CPU profile it is given (and never the
// harness's own), and nothing left on disk after Stop.
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

	// A profiled serve writes its own file; the harness's TIDEMARK_CPU_PROFILE
	// is not inherited (a second serve without one writes nothing there).
	dir := t.TempDir()
	mine, theirs := filepath.Join(dir, "serve.pprof"), filepath.Join(dir, "harness.pprof")
	t.Setenv(ProfileEnv, theirs)
	bin := testenv.Binary(t)
	for _, env := range [][]string{{ProfileEnv + "=" + mine}, nil} {
		srv, err := StartServeEnv(ctx, env, bin, s.DSN, s.Redis.URL(), "ns")
		if err != nil {
			t.Fatal(err)
		}
		srv.Stop()
	}
	if st, err := os.Stat(mine); err != nil || st.Size() == 0 {
		t.Errorf("serve given %s=%s: want its CPU profile there, got %v", ProfileEnv, mine, err)
	}
	if _, err := os.Stat(theirs); !os.IsNotExist(err) {
		t.Errorf("serve wrote the harness's own %s file %s (want it not inherited): %v", ProfileEnv, theirs, err)
	}
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
