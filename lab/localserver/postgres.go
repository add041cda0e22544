package localserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// PostgresConfig says where and how a private Postgres runs.
type PostgresConfig struct {
	// Dir holds the cluster ("data" inside it) and the server log. An
	// existing cluster is reused; an empty or missing Dir is initialised.
	Dir  string
	Port int               // 0 = a free port
	Conf map[string]string // postgresql.conf overrides
	// Ephemeral trades durability for speed (fsync off): tests and benchmarks.
	Ephemeral bool
}

// Postgres is a private PostgreSQL server with wal_level=logical.
type Postgres struct {
	Port int
	Dir  string // data directory

	root string
	bin  string
	cred *syscall.Credential
	conf map[string]string
	logf string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// PostgresBinDir finds the server binaries: $TIDEMARK_PG_BIN (e.g. the
// Postgres 18 that `make deps` unpacks), /usr/lib/postgresql/<newest>/bin, or
// the directory of initdb on PATH.
func PostgresBinDir() (string, error) {
	if d := os.Getenv("TIDEMARK_PG_BIN"); d != "" {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err != nil {
			return "", fmt.Errorf("TIDEMARK_PG_BIN=%s has no initdb: %w", d, err)
		}
		return d, nil
	}
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
	return "", errors.New("PostgreSQL server binaries (initdb, postgres) not found in /usr/lib/postgresql/*/bin or PATH: install them with `apt-get install -y postgresql-15` (or newer)")
}

func pgMajor(dir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return n
}

// NewPostgres prepares (initdb once) and starts a server.
func NewPostgres(cfg PostgresConfig) (*Postgres, error) {
	return newPostgres(cfg, nil)
}

// NewStandby makes a streaming physical standby of primary with
// pg_basebackup -R (hot_standby, following the primary's WAL) in cfg.Dir and
// starts it. A non-empty slot makes the standby stream through that physical
// replication slot (created by pg_basebackup), which Postgres 17+'s
// synchronized_standby_slots can name.
func NewStandby(primary *Postgres, cfg PostgresConfig, slot string) (*Postgres, error) {
	return newPostgres(cfg, func(pg *Postgres) error {
		// dbname in the connection string: Postgres 17+ writes it into
		// primary_conninfo, which slot synchronisation needs.
		args := []string{"-D", pg.Dir, "-d", fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=postgres", primary.Port),
			"-R", "-X", "stream", "-c", "fast", "--no-sync"}
		if slot != "" {
			args = append(args, "-C", "-S", slot)
		}
		if out, err := pg.command("pg_basebackup", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("localserver: pg_basebackup: %v\n%s", err, out)
		}
		return nil
	})
}

// Version is the server's major version (15, 18, ...), read from PG_VERSION.
func (pg *Postgres) Version() int {
	b, _ := os.ReadFile(filepath.Join(pg.Dir, "PG_VERSION"))
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

func newPostgres(cfg PostgresConfig, clone func(*Postgres) error) (*Postgres, error) {
	bin, err := PostgresBinDir()
	if err != nil {
		return nil, err
	}
	root, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("localserver: postgres dir: %w", err)
	}
	pg := &Postgres{Dir: filepath.Join(root, "data"), root: root, bin: bin, Port: cfg.Port,
		logf: filepath.Join(root, "postgres.log")}
	pg.conf = map[string]string{
		"wal_level":                "logical",
		"max_wal_senders":          "40",
		"max_replication_slots":    "40",
		"max_connections":          "300",
		"shared_buffers":           "128MB",
		"listen_addresses":         "'127.0.0.1'",
		"unix_socket_directories":  "'" + root + "'",
		"shared_preload_libraries": "'pg_stat_statements'",
		"wal_sender_timeout":       "10s",
	}
	if cfg.Ephemeral {
		pg.conf["fsync"] = "off"
		pg.conf["full_page_writes"] = "off"
		pg.conf["synchronous_commit"] = "off"
	}
	for k, v := range cfg.Conf {
		pg.conf[k] = v
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
		if err := os.Chown(root, uid, gid); err != nil {
			return nil, err
		}
	}
	if _, err := os.Stat(filepath.Join(pg.Dir, "PG_VERSION")); err != nil {
		init := pg.initdb
		if clone != nil {
			init = func() error { return clone(pg) }
		}
		if err := init(); err != nil {
			return nil, err
		}
	}
	if err := pg.writeConf(); err != nil {
		return nil, err
	}
	if err := pg.Start(); err != nil {
		return nil, err
	}
	return pg, nil
}

func (pg *Postgres) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(pg.bin, name), args...)
	// Own process group (a terminal's Ctrl-C reaches us, not the server, so
	// shutdown stays in order); killed if we die.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: pg.cred, Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	return cmd
}

func (pg *Postgres) initdb() error {
	out, err := pg.command("initdb", "-D", pg.Dir, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync").CombinedOutput()
	if err != nil {
		return fmt.Errorf("localserver: initdb: %v\n%s", err, out)
	}
	hba := "local all all trust\nhost all all 127.0.0.1/32 trust\nlocal replication all trust\nhost replication all 127.0.0.1/32 trust\n"
	return pg.writeOwned("pg_hba.conf", hba)
}

// writeConf puts our settings in postgresql.auto.conf-style include file,
// rewritten on every start so a reused cluster gets the current settings.
func (pg *Postgres) writeConf() error {
	keys := make([]string, 0, len(pg.conf))
	for k := range pg.conf {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("# written by tidemark on every start\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "%s = %s\n", k, pg.conf[k])
	}
	if err := pg.writeOwned("tidemark.conf", b.String()); err != nil {
		return err
	}
	main := filepath.Join(pg.Dir, "postgresql.conf")
	cur, err := os.ReadFile(main)
	if err != nil {
		return err
	}
	if !bytes.Contains(cur, []byte("include_if_exists = 'tidemark.conf'")) {
		cur = append(cur, []byte("\ninclude_if_exists = 'tidemark.conf'\n")...)
		return os.WriteFile(main, cur, 0o600)
	}
	return nil
}

func (pg *Postgres) writeOwned(name, content string) error {
	p := filepath.Join(pg.Dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		return err
	}
	if pg.cred != nil {
		return os.Chown(p, int(pg.cred.Uid), int(pg.cred.Gid))
	}
	return nil
}

// Start starts (or restarts) the server and waits until it accepts
// connections.
func (pg *Postgres) Start() error {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	if pg.cmd != nil {
		return nil
	}
	if pg.Port == 0 {
		p, err := FreePort()
		if err != nil {
			return err
		}
		pg.Port = p
	}
	// A previous run killed hard may leave a stale pid file; postgres itself
	// checks whether that pid is alive, so starting is safe.
	logFile, err := os.OpenFile(pg.logf, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o666)
	if err != nil {
		return err
	}
	cmd := pg.command("postgres", "-D", pg.Dir, "-p", strconv.Itoa(pg.Port))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("localserver: start postgres: %w", err)
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
			return fmt.Errorf("localserver: postgres exited during start-up:\n%s", pg.LogTail())
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("localserver: postgres did not accept connections within 60s: %v\n%s", err, pg.LogTail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop shuts the server down cleanly (fast mode) and waits for it to exit.
func (pg *Postgres) Stop() { pg.signal(syscall.SIGINT) }

// Kill kills the server and its backends with SIGKILL, as a crash would.
func (pg *Postgres) Kill() { pg.signal(syscall.SIGKILL) }

func (pg *Postgres) signal(sig syscall.Signal) {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	if pg.cmd == nil {
		return
	}
	// SIGKILL goes to the whole process group (the backends too); a clean
	// stop is the postmaster's to order.
	signalWait(pg.cmd, pg.done, sig, sig == syscall.SIGKILL, 30*time.Second)
	pg.cmd = nil
}

// Remove stops the server and deletes its directory.
func (pg *Postgres) Remove() {
	pg.Stop()
	os.RemoveAll(pg.root)
}

// LogTail returns the end of the server log, for error messages.
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
