package testenv

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"tidemark/migrations"
)

// Postgres is a private PostgreSQL server with wal_level=logical.
type Postgres struct {
	Port int
	Dir  string // data directory

	bin  string
	cred *syscall.Credential
	conf map[string]string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	logf string
}

// PGOption changes how a private Postgres is configured.
type PGOption func(map[string]string)

// PGConf sets a postgresql.conf parameter, e.g. PGConf("wal_level", "replica").
func PGConf(name, value string) PGOption {
	return func(m map[string]string) { m[name] = value }
}

// PostgresBinDir finds the server binaries: /usr/lib/postgresql/<newest>/bin,
// or the directory of postgres on PATH.
func PostgresBinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgMajor(dirs[i]) > pgMajor(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", fmt.Errorf("PostgreSQL server binaries (initdb, postgres) not found in /usr/lib/postgresql/*/bin or PATH: install them with `apt-get install -y postgresql-15` (or newer)")
}

func pgMajor(dir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return n
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
	sharedPG.once.Do(func() {
		sharedPG.pg, sharedPG.err = startPostgres(nil)
		if sharedPG.err == nil {
			shared.add(sharedPG.pg.destroy)
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
	pg, err := startPostgres(opts)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(pg.destroy)
	return pg
}

func startPostgres(opts []PGOption) (*Postgres, error) {
	bin, err := PostgresBinDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "tidemark-pg-")
	if err != nil {
		return nil, err
	}
	pg := &Postgres{Dir: filepath.Join(dir, "data"), bin: bin, logf: filepath.Join(dir, "postgres.log")}
	pg.conf = map[string]string{
		"wal_level":                "logical",
		"max_wal_senders":          "40",
		"max_replication_slots":    "40",
		"max_connections":          "300",
		"fsync":                    "off",
		"full_page_writes":         "off",
		"synchronous_commit":       "off",
		"shared_buffers":           "128MB",
		"listen_addresses":         "'127.0.0.1'",
		"unix_socket_directories":  "'" + dir + "'",
		"shared_preload_libraries": "'pg_stat_statements'",
		"wal_sender_timeout":       "10s",
	}
	for _, o := range opts {
		o(pg.conf)
	}
	if os.Geteuid() == 0 {
		// initdb refuses to run as root: run the server as the postgres user.
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root, and there is no 'postgres' user to run the server as (apt-get install -y postgresql-15 creates it): %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		pg.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			return nil, err
		}
	}
	if err := pg.initdb(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := pg.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return pg, nil
}

func (pg *Postgres) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(pg.bin, name), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: pg.cred, Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	return cmd
}

func (pg *Postgres) initdb() error {
	cmd := pg.command("initdb", "-D", pg.Dir, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("initdb: %v\n%s", err, out)
	}
	var conf strings.Builder
	keys := make([]string, 0, len(pg.conf))
	for k := range pg.conf {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&conf, "%s = %s\n", k, pg.conf[k])
	}
	f, err := os.OpenFile(filepath.Join(pg.Dir, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.WriteString(conf.String())
	hba := "local all all trust\nhost all all 127.0.0.1/32 trust\nlocal replication all trust\nhost replication all 127.0.0.1/32 trust\n"
	if err == nil {
		err = os.WriteFile(filepath.Join(pg.Dir, "pg_hba.conf"), []byte(hba), 0o600)
	}
	if err == nil && pg.cred != nil {
		err = os.Chown(filepath.Join(pg.Dir, "pg_hba.conf"), int(pg.cred.Uid), int(pg.cred.Gid))
	}
	return err
}

// Start starts (or restarts) the server on its port and waits until it
// accepts connections.
func (pg *Postgres) Start() error {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	if pg.cmd != nil {
		return nil
	}
	if pg.Port == 0 {
		l, err := freePort()
		if err != nil {
			return err
		}
		pg.Port = l
	}
	logFile, err := os.OpenFile(pg.logf, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o666)
	if err != nil {
		return err
	}
	cmd := pg.command("postgres", "-D", pg.Dir, "-p", strconv.Itoa(pg.Port))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("start postgres: %w", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); logFile.Close(); close(done) }()
	pg.cmd, pg.done = cmd, done

	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, pg.DSN("postgres"))
		cancel()
		if err == nil {
			conn.Close(context.Background())
			return nil
		}
		select {
		case <-done:
			pg.cmd = nil
			return fmt.Errorf("postgres exited during start-up:\n%s", pg.LogTail())
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres did not accept connections within 60s: %v\n%s", err, pg.LogTail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop shuts the server down cleanly (fast mode) and waits for it to exit.
func (pg *Postgres) Stop() { pg.signal(syscall.SIGINT) }

// Kill kills the server with SIGKILL, as a crash would.
func (pg *Postgres) Kill() { pg.signal(syscall.SIGKILL) }

func (pg *Postgres) signal(sig syscall.Signal) {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	if pg.cmd == nil {
		return
	}
	if sig == syscall.SIGKILL {
		syscall.Kill(-pg.cmd.Process.Pid, sig) // the whole process group: backends too
	} else {
		pg.cmd.Process.Signal(sig)
	}
	select {
	case <-pg.done:
	case <-time.After(30 * time.Second):
		syscall.Kill(-pg.cmd.Process.Pid, syscall.SIGKILL)
		<-pg.done
	}
	pg.cmd = nil
}

func (pg *Postgres) destroy() {
	pg.Stop()
	os.RemoveAll(filepath.Dir(pg.Dir))
}

// LogTail returns the end of the server log, for failure messages.
func (pg *Postgres) LogTail() string {
	b, _ := os.ReadFile(pg.logf)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(bytes.TrimSpace(b))
}

// DSN is a connection string for database db as the superuser postgres.
func (pg *Postgres) DSN(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", pg.Port, db)
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
		conn.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE database = $1 AND active_pid IS NOT NULL`, name)
		conn.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1`, name)
		conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
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

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
