package testenv

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/lab/localserver"
	"github.com/tidemark/tidemark/migrations"
)

// Postgres is a private PostgreSQL server with wal_level=logical (see
// localserver.Postgres for Start, Stop, Kill, DSN and LogTail).
type Postgres struct {
	*localserver.Postgres
}

// PGOption changes how a private Postgres is configured.
type PGOption func(map[string]string)

// PGConf sets a postgresql.conf parameter, e.g. PGConf("wal_level", "replica").
func PGConf(name, value string) PGOption {
	return func(m map[string]string) { m[name] = value }
}

var sharedPG struct {
	once sync.Once
	pg   *Postgres
	err  error
}

// SharedPostgres returns the Postgres server shared by the tests of this
// binary (started on first use, stopped by Main). Give each test its own
// database with NewDatabase.
func SharedPostgres(t testing.TB) *Postgres {
	t.Helper()
	needServer(t, "SharedPostgres")
	sharedPG.once.Do(func() {
		sharedPG.pg, sharedPG.err = startPostgres(nil)
		if sharedPG.err == nil {
			shared.add(sharedPG.pg.Remove)
		}
	})
	if sharedPG.err != nil {
		t.Fatalf("testenv: %v", sharedPG.err)
	}
	return sharedPG.pg
}

// StartPostgres starts a private Postgres for one test (use it when the test
// stops, kills or reconfigures the server).
func StartPostgres(t testing.TB, opts ...PGOption) *Postgres {
	t.Helper()
	needServer(t, "StartPostgres")
	pg, err := startPostgres(opts)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(pg.Remove)
	return pg
}

func startPostgres(opts []PGOption) (*Postgres, error) {
	dir, err := os.MkdirTemp("", "tidemark-pg-")
	if err != nil {
		return nil, err
	}
	conf := map[string]string{}
	for _, o := range opts {
		o(conf)
	}
	pg, err := localserver.NewPostgres(localserver.PostgresConfig{Dir: dir, Conf: conf, Ephemeral: true})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return &Postgres{pg}, nil
}

// Exec runs SQL on database db and fails the test on error.
func (pg *Postgres) Exec(t testing.TB, db, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pg.DSN(db))
	if err != nil {
		t.Fatalf("testenv: connect to %s: %v", db, err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("testenv: exec %q: %v", sql, err)
	}
}

// Connect opens a connection to database db, closed when the test ends.
func (pg *Postgres) Connect(t testing.TB, db string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pg.DSN(db))
	if err != nil {
		t.Fatalf("testenv: connect to %s: %v", db, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// NewDatabase creates an empty database with a unique name and returns its
// name. It is dropped when the test ends (slots using it are dropped first).
func (pg *Postgres) NewDatabase(t testing.TB) string {
	t.Helper()
	name := Unique(t, "db")
	pg.Exec(t, "postgres", "CREATE DATABASE "+name)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, pg.DSN("postgres"))
		if err != nil {
			return // the server is gone; its directory goes with it
		}
		defer conn.Close(ctx)
		// A database left behind costs only disk on a throwaway server: say
		// so in the test's log, and go on.
		exec := func(q string, args ...any) {
			if _, err := conn.Exec(ctx, q, args...); err != nil {
				t.Logf("testenv: drop database %s: %v", name, err)
			}
		}
		exec(`SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE database = $1 AND active_pid IS NOT NULL`, name)
		exec(`SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1`, name)
		exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)")
	})
	return name
}

// MigratedDatabase creates a database and applies tidemark's migrations.
// It returns the database's DSN.
func (pg *Postgres) MigratedDatabase(t testing.TB) string {
	t.Helper()
	dsn := pg.DSN(pg.NewDatabase(t))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := migrations.Up(ctx, dsn, Logger(t)); err != nil {
		t.Fatalf("testenv: migrate: %v", err)
	}
	return dsn
}

// StartStandby starts a streaming physical standby of primary (pg_basebackup
// -R) for one test; slot, when set, is the physical slot it streams through.
func StartStandby(t testing.TB, primary *Postgres, slot string, opts ...PGOption) *Postgres {
	t.Helper()
	needServer(t, "StartStandby")
	dir, err := os.MkdirTemp("", "tidemark-pgstandby-")
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	conf := map[string]string{}
	for _, o := range opts {
		o(conf)
	}
	pg, err := localserver.NewStandby(primary.Postgres, localserver.PostgresConfig{Dir: dir, Conf: conf, Ephemeral: true}, slot)
	if err != nil {
		os.RemoveAll(dir)
		t.Fatalf("testenv: standby: %v", err)
	}
	t.Cleanup(pg.Remove)
	return &Postgres{pg}
}
