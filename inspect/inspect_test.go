package inspect

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/internal/tlsfiles"
	"github.com/tidemark/tidemark/lab/localserver"
	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/schema"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// The inspector must find an entry that would still be served while the
// source has had a newer version for longer than the SLO, and must not flag
// consistent or expired entries.
func TestFindsEntryServedPastSLO(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	dsn := pg.MigratedDatabase(t)
	r := testenv.StartRedis(t)
	rdb := r.Client(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `INSERT INTO catalog.items (tenant_id, item_id, version, display, updated_at) VALUES
		('acme', 'ok', 3, '{}', now()),
		('acme', 'bad', 2, '{}', now() - interval '60 seconds'),
		('acme', 'old', 5, '{}', now() - interval '60 seconds')`); err != nil {
		t.Fatal(err)
	}

	now := time.Now().UnixMilli()
	ms := func(d time.Duration) string { return strconv.FormatInt(now+d.Milliseconds(), 10) }
	set := func(item string, fields ...any) {
		if err := rdb.HSet(ctx, schema.RedisKey("catalog", "acme", item), fields...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// Consistent: cached v3, source v3.
	set("ok", "v", 3, "p", "{}", "obs", ms(-time.Second), "soft", ms(3*time.Second), "hard", ms(28*time.Second), "floor", 3)
	// Broken: cached v1 never invalidated, would be served for 20 s more,
	// while v2 was committed 60 s ago.
	set("bad", "v", 1, "p", "{}", "obs", ms(-10*time.Second), "soft", ms(3*time.Second), "hard", ms(20*time.Second), "floor", 1)
	// Behind but past its hard deadline: never served again.
	set("old", "v", 4, "p", "{}", "obs", ms(-40*time.Second), "soft", ms(-35*time.Second), "hard", ms(-10*time.Second), "floor", 5, "stale", 1)

	cfg := DefaultConfig()
	cfg.Redis, cfg.PG = r.URL(), dsn
	rep, err := Run(ctx, cfg, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Checked != 3 || rep.Consistent != 1 || rep.Expired != 1 || rep.Behind != 1 || rep.Violations != 1 {
		t.Fatalf("report %+v", rep)
	}
	f := rep.Findings[0]
	if f.Item != "bad" || !f.Violation || f.Invalidated || f.BehindForS < 55 {
		t.Fatalf("finding %+v", f)
	}

	// --tenant narrows the sample.
	cfg.Tenant = "globex"
	if rep, err := Run(ctx, cfg, testenv.Logger(t)); err != nil || rep.Checked != 0 {
		t.Fatalf("other tenant: %+v %v", rep, err)
	}
}

// On a Redis Cluster over TLS whose only users are ACL users (the default
// user off), inspect reaches every master as the user holding
// cache.ACLRules, the password from a file, given one node's rediss://
// address (a configuration endpoint) with the CA and a client certificate:
// its per-master scans use the Cluster client's own connections, not bare
// clients of their own.
func TestInspectClusterAsACLUser(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	dsn := pg.MigratedDatabase(t)
	certs, err := localserver.MakeCerts(filepath.Join(t.TempDir(), "certs"))
	if err != nil {
		t.Fatal(err)
	}
	rc := testenv.StartRedisClusterTLS(t, 3, certs)
	ctx := testenv.Context(t, time.Minute)
	for _, n := range rc.Nodes {
		node := redis.NewClient(&redis.Options{Addr: n.Addr})
		args := []any{"ACL", "SETUSER", "tidemark", "on", ">s3cret"}
		for _, r := range strings.Fields(cache.ACLRules("catalog")) {
			args = append(args, r)
		}
		for _, cmd := range [][]any{args, {"ACL", "SETUSER", "admin", "on", ">adm", "~*", "&*", "+@all"}, {"ACL", "SETUSER", "default", "off"}} {
			if err := node.Do(ctx, cmd...).Err(); err != nil {
				t.Fatalf("%s on %s: %v", cmd, n.Addr, err)
			}
		}
		node.Close()
	}
	admin := redis.NewClusterClient(&redis.ClusterOptions{Addrs: rc.Addrs(), Username: "admin", Password: "adm"})
	defer admin.Close()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	const n = 30 // spread over every master's slots
	if _, err := conn.Exec(ctx, `INSERT INTO catalog.items (tenant_id, item_id, version, display, updated_at)
		SELECT 'acme', 'i' || i, 1, '{}', now() FROM generate_series(1, $1) i`, n); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli()
	for i := 1; i <= n; i++ {
		if err := admin.HSet(ctx, schema.RedisKey("catalog", "acme", "i"+strconv.Itoa(i)), "v", 1, "p", "{}", "obs", now, "soft", now+3000, "hard", now+28000, "floor", 1).Err(); err != nil {
			t.Fatal(err)
		}
	}
	pw := filepath.Join(t.TempDir(), "redis-password")
	if err := os.WriteFile(pw, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Redis, cfg.PG = "rediss://"+rc.Nodes[0].TLSAddr, dsn
	cfg.RedisConn = cache.RedisConfig{Mode: cache.ModeAuto, Username: "tidemark", PasswordFile: pw,
		TLS: tlsfiles.Config{CAFile: certs.CA, CertFile: certs.ClientCert, KeyFile: certs.ClientKey}}
	rep, err := Run(ctx, cfg, testenv.Logger(t))
	if err != nil {
		t.Fatalf("inspect as the ACL user on a Cluster: %v", err)
	}
	if rep.Checked != n || rep.Consistent != n {
		t.Fatalf("inspect checked %d entries, %d consistent; want all %d from every master", rep.Checked, rep.Consistent, n)
	}
}
