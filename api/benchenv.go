package api

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// benchServers are the private Postgres and Redis `tidemark bench serve`
// starts when it is not given --pg and --redis (the test helpers live in
// internal/testenv and are for tests only).
type benchServers struct {
	dir   string
	procs []*exec.Cmd
	PGDSN string
	Redis string
}

func startBenchServers(ctx context.Context) (*benchServers, error) {
	dir, err := os.MkdirTemp("", "tidemark-bench-")
	if err != nil {
		return nil, err
	}
	b := &benchServers{dir: dir}
	if err := b.startRedis(ctx); err != nil {
		b.Stop()
		return nil, err
	}
	if err := b.startPostgres(ctx); err != nil {
		b.Stop()
		return nil, err
	}
	return b, nil
}

// Stop kills the servers and removes their files.
func (b *benchServers) Stop() {
	for _, p := range b.procs {
		p.Process.Signal(syscall.SIGINT)
		done := make(chan struct{})
		go func() { p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			p.Process.Kill()
			<-done
		}
	}
	os.RemoveAll(b.dir)
}

func freeLocalPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (b *benchServers) startRedis(ctx context.Context) error {
	port, err := freeLocalPort()
	if err != nil {
		return err
	}
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "",
		"--appendonly", "no", "--dir", b.dir, "--logfile", filepath.Join(b.dir, "redis.log"), "--protected-mode", "no")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server (apt-get install -y redis-server): %w", err)
	}
	b.procs = append(b.procs, cmd)
	b.Redis = fmt.Sprintf("redis://127.0.0.1:%d/0", port)
	c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port)})
	defer c.Close()
	return waitFor(ctx, 20*time.Second, func(ctx context.Context) error { return c.Ping(ctx).Err() })
}

func (b *benchServers) startPostgres(ctx context.Context) error {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	sort.Strings(dirs)
	initdb := ""
	if len(dirs) > 0 {
		initdb = dirs[len(dirs)-1]
	} else if p, err := exec.LookPath("initdb"); err == nil {
		initdb = p
	} else {
		return fmt.Errorf("PostgreSQL server binaries not found (apt-get install -y postgresql)")
	}
	bin := filepath.Dir(initdb)
	var cred *syscall.Credential
	if os.Geteuid() == 0 { // initdb refuses root: run as postgres
		u, err := user.Lookup("postgres")
		if err != nil {
			return fmt.Errorf("running as root without a postgres user: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(b.dir, uid, gid); err != nil {
			return err
		}
	}
	data := filepath.Join(b.dir, "pg")
	cmd := exec.Command(initdb, "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %v\n%s", err, out)
	}
	port, err := freeLocalPort()
	if err != nil {
		return err
	}
	cmd = exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-p", strconv.Itoa(port), "-k", b.dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off",
		"-c", "full_page_writes=off", "-c", "max_connections=200", "-c", "shared_preload_libraries=pg_stat_statements")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	logf, err := os.Create(filepath.Join(b.dir, "postgres.log"))
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	b.procs = append(b.procs, cmd)
	b.PGDSN = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	return waitFor(ctx, 60*time.Second, func(ctx context.Context) error {
		c, err := pgx.Connect(ctx, b.PGDSN)
		if err == nil {
			c.Close(ctx)
		}
		return err
	})
}

func waitFor(ctx context.Context, limit time.Duration, f func(context.Context) error) error {
	deadline := time.Now().Add(limit)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		err := f(cctx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("not ready after %s: %w", limit, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
