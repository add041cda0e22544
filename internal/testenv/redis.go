package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is a private redis-server process. Data lives in memory only, so a
// Restart loses everything and gets a new run_id, as a real restart would.
type Redis struct {
	Port int
	Addr string // 127.0.0.1:<port>

	dir     string
	cluster bool

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// RedisServerPath finds redis-server on PATH.
func RedisServerPath() (string, error) {
	p, err := exec.LookPath("redis-server")
	if err != nil {
		return "", fmt.Errorf("redis-server not found on PATH: install it with `apt-get install -y redis-server`")
	}
	return p, nil
}

// StartRedis starts a private redis-server for one test.
func StartRedis(t testing.TB) *Redis {
	t.Helper()
	r, err := startRedis(false)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(r.destroy)
	return r
}

func startRedis(cluster bool) (*Redis, error) {
	if _, err := RedisServerPath(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "tidemark-redis-")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	r := &Redis{Port: port, Addr: "127.0.0.1:" + strconv.Itoa(port), dir: dir, cluster: cluster}
	if err := r.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return r, nil
}

// URL is a go-redis URL for the server.
func (r *Redis) URL() string { return "redis://" + r.Addr + "/0" }

// Start starts (or restarts) the server on its port and waits for PING.
func (r *Redis) Start() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd != nil {
		return nil
	}
	args := []string{"--port", strconv.Itoa(r.Port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", r.dir, "--logfile", filepath.Join(r.dir, "redis.log"), "--protected-mode", "no"}
	if r.cluster {
		args = append(args, "--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(r.dir, "nodes.conf"),
			"--cluster-node-timeout", "2000")
	}
	cmd := exec.Command("redis-server", args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	r.cmd, r.done = cmd, done
	c := redis.NewClient(&redis.Options{Addr: r.Addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-done:
			r.cmd = nil
			b, _ := os.ReadFile(filepath.Join(r.dir, "redis.log"))
			return fmt.Errorf("redis-server exited during start-up: %s", b)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server did not answer PING within 20s: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop shuts the server down (data is lost: no persistence).
func (r *Redis) Stop() { r.signal(syscall.SIGTERM) }

// Kill kills the server with SIGKILL.
func (r *Redis) Kill() { r.signal(syscall.SIGKILL) }

// Restart stops and starts the server on the same port: empty data, new run_id.
func (r *Redis) Restart(t testing.TB) {
	t.Helper()
	r.Stop()
	if r.cluster {
		os.Remove(filepath.Join(r.dir, "nodes.conf"))
	}
	if err := r.Start(); err != nil {
		t.Fatalf("testenv: restart redis: %v", err)
	}
}

func (r *Redis) signal(sig syscall.Signal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return
	}
	r.cmd.Process.Signal(sig)
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		r.cmd.Process.Kill()
		<-r.done
	}
	r.cmd = nil
}

func (r *Redis) destroy() {
	r.Kill()
	os.RemoveAll(r.dir)
}

// Client returns a go-redis client for the server, closed when the test ends.
func (r *Redis) Client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: r.Addr})
	t.Cleanup(func() { c.Close() })
	return c
}

// RedisCluster is a Redis Cluster of private redis-server masters with the
// 16384 slots split evenly and no replicas.
type RedisCluster struct {
	Nodes []*Redis
}

// StartRedisCluster starts n masters and forms a cluster.
func StartRedisCluster(t testing.TB, n int) *RedisCluster {
	t.Helper()
	rc := &RedisCluster{}
	for i := 0; i < n; i++ {
		r, err := startRedis(true)
		if err != nil {
			t.Fatalf("testenv: %v", err)
		}
		t.Cleanup(r.destroy)
		rc.Nodes = append(rc.Nodes, r)
	}
	if err := rc.form(); err != nil {
		t.Fatalf("testenv: form redis cluster: %v", err)
	}
	return rc
}

// Addrs lists the nodes' addresses.
func (rc *RedisCluster) Addrs() []string {
	var a []string
	for _, r := range rc.Nodes {
		a = append(a, r.Addr)
	}
	return a
}

// URL is a comma-separated seed list usable as tidemark's --redis value.
func (rc *RedisCluster) URL() string {
	return "redis://" + strings.Join(rc.Addrs(), ",")
}

func (rc *RedisCluster) form() error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	per := 16384 / len(rc.Nodes)
	for i, r := range rc.Nodes {
		c := redis.NewClient(&redis.Options{Addr: r.Addr})
		lo, hi := i*per, (i+1)*per-1
		if i == len(rc.Nodes)-1 {
			hi = 16383
		}
		err := c.ClusterAddSlotsRange(ctx, lo, hi).Err()
		if err == nil && i > 0 {
			err = c.ClusterMeet(ctx, "127.0.0.1", strconv.Itoa(rc.Nodes[0].Port)).Err()
		}
		c.Close()
		if err != nil {
			return err
		}
	}
	return rc.WaitReady(ctx)
}

// WaitReady waits until every node reports cluster_state:ok and knows all nodes.
func (rc *RedisCluster) WaitReady(ctx context.Context) error {
	for _, r := range rc.Nodes {
		c := redis.NewClient(&redis.Options{Addr: r.Addr})
		for {
			info, err := c.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") &&
				strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(len(rc.Nodes))) {
				break
			}
			select {
			case <-ctx.Done():
				c.Close()
				return fmt.Errorf("cluster not ready: %v %s", err, info)
			case <-time.After(50 * time.Millisecond):
			}
		}
		c.Close()
	}
	return nil
}

// Client returns a cluster client, closed when the test ends.
func (rc *RedisCluster) Client(t testing.TB) *redis.ClusterClient {
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: rc.Addrs()})
	t.Cleanup(func() { c.Close() })
	return c
}
