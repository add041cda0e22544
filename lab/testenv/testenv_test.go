package testenv

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/tidemark/migrations"
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

// MigratedDatabase gives each caller its own database on the shared server,
// with every migration applied, and drops it when the test ends.
func TestSharedPostgresMigratedDatabase(t *testing.T) {
	pg := SharedPostgres(t)
	ctx := Context(t, 60*time.Second)
	var names [2]string
	t.Run("own database", func(t *testing.T) {
		for i := range names {
			dsn := pg.MigratedDatabase(t)
			conn, err := pgx.Connect(ctx, dsn)
			if err != nil {
				t.Fatalf("connect to the DSN MigratedDatabase returned (%s): %v", dsn, err)
			}
			t.Cleanup(func() { conn.Close(context.Background()) })
			if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&names[i]); err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(names[i], "db_") {
				t.Errorf("DSN %s: want a database of its own (db_...), got %q", dsn, names[i])
			}
			applied, pending, err := migrations.Status(ctx, dsn)
			if err != nil || len(pending) != 0 || len(applied) == 0 {
				t.Errorf("migrations in %s: want all applied and none pending, got applied %v pending %v (%v)", names[i], applied, pending, err)
			}
			var items *string
			if err := conn.QueryRow(ctx, "SELECT to_regclass('catalog.items')::text").Scan(&items); err != nil || items == nil {
				t.Errorf("catalog.items in %s: want the migrated table, got %v (%v)", names[i], items, err)
			}
		}
		if names[0] == names[1] {
			t.Errorf("two calls: want two databases, got %q twice", names[0])
		}
	})
	conn := pg.Connect(t, "postgres")
	for _, name := range names {
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname = $1", name).Scan(&n); err != nil || n != 0 {
			t.Errorf("database %q after its test ended: want dropped, got %d rows (%v)", name, n, err)
		}
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
	if err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { masters.Add(1); return nil }); err != nil {
		t.Fatal(err)
	}
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
