package capture

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
)

// PrivatePostgres is a throwaway server for `tidemark bench capture` when
// no --pg is given: initdb in a temp dir, wal_level=logical, trust auth on
// 127.0.0.1, removed by Close.
type PrivatePostgres struct {
	DSN string
	dir string
	cmd *exec.Cmd
}

// StartPrivatePostgres starts the newest installed server.
func StartPrivatePostgres(ctx context.Context) (*PrivatePostgres, error) {
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	sort.Sort(sort.Reverse(sort.StringSlice(bins)))
	if len(bins) == 0 {
		return nil, fmt.Errorf("bench: no Postgres server binaries in /usr/lib/postgresql/*/bin: apt-get install -y postgresql-15, or pass --pg")
	}
	bin := filepath.Dir(bins[0])
	dir, err := os.MkdirTemp("", "tidemark-bench-pg-")
	if err != nil {
		return nil, err
	}
	pp := &PrivatePostgres{dir: dir}
	var cred *syscall.Credential
	if os.Geteuid() == 0 { // initdb refuses root
		u, err := user.Lookup("postgres")
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("bench: running as root needs a 'postgres' user: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		os.Chown(dir, uid, gid)
	}
	run := func(name string, args ...string) *exec.Cmd {
		c := exec.Command(filepath.Join(bin, name), args...)
		c.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGKILL}
		c.Env = append(os.Environ(), "LC_ALL=C")
		return c
	}
	data := filepath.Join(dir, "data")
	if out, err := run("initdb", "-D", data, "-U", "postgres", "-A", "trust", "--no-sync").CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("bench: initdb: %v: %s", err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	pp.cmd = run("postgres", "-D", data, "-p", strconv.Itoa(port), "-c", "wal_level=logical", "-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories="+dir, "-c", "fsync=off", "-c", "max_wal_senders=10", "-c", "max_replication_slots=10",
		"-c", "shared_buffers=256MB", "-c", "max_wal_size=4GB")
	if err := pp.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("bench: start postgres: %w", err)
	}
	pp.DSN = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	for deadline := time.Now().Add(30 * time.Second); ; {
		c, err := pgx.Connect(ctx, pp.DSN)
		if err == nil {
			c.Close(ctx)
			return pp, nil
		}
		if time.Now().After(deadline) {
			pp.Close()
			return nil, fmt.Errorf("bench: postgres did not start: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Close stops the server and removes its files.
func (p *PrivatePostgres) Close() {
	if p.cmd != nil && p.cmd.Process != nil {
		p.cmd.Process.Signal(syscall.SIGINT)
		done := make(chan struct{})
		go func() { p.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	}
	os.RemoveAll(p.dir)
}
