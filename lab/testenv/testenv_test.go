package testenv

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestMain(m *testing.M) { Main(m) }

func TestPostgresIsLogicalAndRestartable(t *testing.T) {
	pg := StartPostgres(t)
	conn := pg.Connect(t, "postgres")
	var level string
	if err := conn.QueryRow(context.Background(), "SHOW wal_level").Scan(&level); err != nil || level != "logical" {
		t.Fatalf("wal_level = %q, %v", level, err)
	}
	pg.Stop()
	if err := pg.Start(); err != nil {
		t.Fatal(err)
	}
	c2 := pg.Connect(t, "postgres")
	if err := c2.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestSharedPostgresMigratedDatabase(t *testing.T) {
	pg := SharedPostgres(t)
	dsn := pg.MigratedDatabase(t)
	_ = dsn
	var n int
	conn := pg.Connect(t, "postgres")
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM pg_database WHERE datname LIKE 'db_%'").Scan(&n); err != nil || n < 1 {
		t.Fatalf("databases: %d %v", n, err)
	}
}

func TestRedisRestartChangesRunID(t *testing.T) {
	r := StartRedis(t)
	c := r.Client(t)
	ctx := context.Background()
	id1 := runID(t, c.Info(ctx, "server").Val())
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	r.Restart(t)
	Eventually(t, 5*time.Second, "redis back", func() error { return c.Ping(ctx).Err() })
	if id2 := runID(t, c.Info(ctx, "server").Val()); id1 == id2 {
		t.Fatalf("run_id unchanged after restart: %s", id1)
	}
	if n := c.Exists(ctx, "k").Val(); n != 0 {
		t.Fatal("data survived a restart: tests of data loss would be wrong")
	}
}

func runID(t *testing.T, info string) string {
	for _, line := range strings.Split(info, "\r\n") {
		if id, ok := strings.CutPrefix(line, "run_id:"); ok {
			return id
		}
	}
	t.Fatalf("no run_id in %q", info)
	return ""
}

func TestRedisClusterRoutes(t *testing.T) {
	rc := StartRedisCluster(t, 3)
	c := rc.Client(t)
	ctx := context.Background()
	for _, k := range []string{"a", "b", "c", "{x}1", "{x}2"} {
		if err := c.Set(ctx, k, k, 0).Err(); err != nil {
			t.Fatalf("set %s: %v", k, err)
		}
	}
	var masters atomic.Int32 // ForEachMaster calls back concurrently
	c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { masters.Add(1); return nil })
	if masters := masters.Load(); masters != 3 {
		t.Fatalf("masters = %d", masters)
	}
}

func TestKafka(t *testing.T) {
	k := StartKafka(t)
	topic := Unique(t, "t")
	k.CreateTopic(t, topic, 3, nil)
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(context.Background(), kgo.StringRecord("x")).FirstErr(); err != nil {
		t.Fatal(err)
	}
}
