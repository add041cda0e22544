package localserver

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sentinel is a private redis-server in Sentinel mode watching one master.
type Sentinel struct {
	Addr string
	dir  string
	cmd  *exec.Cmd
	done chan struct{}
}

// NewSentinel starts a Sentinel in dir that monitors master (host:port) as
// the master set name, with quorum 1 and a 1 s down-after, so a test sees
// failovers within seconds.
func NewSentinel(dir, name, master string) (*Sentinel, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	port, err := freePort(0)
	if err != nil {
		return nil, err
	}
	h, p, _ := strings.Cut(master, ":")
	conf := filepath.Join(dir, "sentinel.conf")
	body := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nlogfile %s\nsentinel monitor %s %s %s 1\nsentinel down-after-milliseconds %s 1000\nsentinel failover-timeout %s 5000\n",
		port, dir, filepath.Join(dir, "sentinel.log"), name, h, p, name, name)
	if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command("redis-server", conf, "--sentinel")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("localserver: start sentinel: %w", err)
	}
	s := &Sentinel{Addr: "127.0.0.1:" + strconv.Itoa(port), dir: dir, cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); close(s.done) }()
	c := redis.NewSentinelClient(&redis.Options{Addr: s.Addr})
	defer c.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.GetMasterAddrByName(ctx, name).Result()
		cancel()
		if err == nil {
			return s, nil
		}
		if time.Now().After(deadline) {
			s.Stop()
			b, _ := os.ReadFile(filepath.Join(dir, "sentinel.log"))
			return nil, fmt.Errorf("localserver: sentinel did not know master %s within 20s: %v\n%s", name, err, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop kills the Sentinel.
func (s *Sentinel) Stop() {
	if s.cmd.Process != nil {
		s.cmd.Process.Kill()
		<-s.done
	}
}
