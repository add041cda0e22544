package localserver

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
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisConfig says where and how a private redis-server runs.
type RedisConfig struct {
	Dir     string // working directory: log, and the RDB file when Persist
	Port    int    // 0 = a free port
	Cluster bool   // cluster-enabled node (the caller forms the cluster)
	Persist bool   // save an RDB snapshot on shutdown and every minute
	// TLS, when set, adds a TLS port (TLSAddr) serving these certificates;
	// clients may present one signed by the CA. The plain port stays for
	// the lab's own start-up checks. A Cluster node also speaks TLS on its
	// cluster bus and names its TLS port to TLS clients (tls-cluster).
	TLS       *Certs
	ReplicaOf string // host:port of the master this server replicates
}

// Redis is a private redis-server process.
type Redis struct {
	Port    int
	Addr    string // 127.0.0.1:<port>
	TLSAddr string // 127.0.0.1:<tls port>, with RedisConfig.TLS

	cfg     RedisConfig
	tlsPort int
	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
}

// RedisServerPath finds redis-server on PATH.
func RedisServerPath() (string, error) {
	p, err := exec.LookPath("redis-server")
	if err != nil {
		return "", fmt.Errorf("redis-server not found on PATH: install it with `apt-get install -y redis-server`")
	}
	return p, nil
}

// NewRedis starts a server.
func NewRedis(cfg RedisConfig) (*Redis, error) {
	if _, err := RedisServerPath(); err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, err
	}
	cfg.Dir = dir
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("localserver: redis dir: %w", err)
	}
	if cfg.Port == 0 {
		offset := 0
		if cfg.Cluster {
			offset = clusterBusOffset
		}
		if cfg.Port, err = freePort(offset); err != nil {
			return nil, err
		}
	}
	r := &Redis{Port: cfg.Port, Addr: "127.0.0.1:" + strconv.Itoa(cfg.Port), cfg: cfg}
	if cfg.TLS != nil {
		offset := 0
		if cfg.Cluster { // tls-cluster: the bus is the TLS port's + 10000
			offset = clusterBusOffset
		}
		if r.tlsPort, err = freePort(offset); err != nil {
			return nil, err
		}
		r.TLSAddr = "127.0.0.1:" + strconv.Itoa(r.tlsPort)
	}
	if err := r.Start(); err != nil {
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
	args := []string{"--port", strconv.Itoa(r.Port), "--bind", "127.0.0.1", "--dir", r.cfg.Dir,
		"--logfile", filepath.Join(r.cfg.Dir, "redis.log"), "--protected-mode", "no", "--appendonly", "no"}
	if r.cfg.Persist {
		args = append(args, "--save", "60 1")
	} else {
		args = append(args, "--save", "")
	}
	if t := r.cfg.TLS; t != nil {
		args = append(args, "--tls-port", strconv.Itoa(r.tlsPort), "--tls-cert-file", t.ServerCert, "--tls-key-file", t.ServerKey,
			"--tls-ca-cert-file", t.CA, "--tls-auth-clients", "optional")
	}
	if r.cfg.ReplicaOf != "" {
		h, p, _ := strings.Cut(r.cfg.ReplicaOf, ":")
		args = append(args, "--replicaof", h, p)
	}
	if r.cfg.Cluster {
		os.Remove(filepath.Join(r.cfg.Dir, "nodes.conf")) // a restarted node is a new, empty node
		args = append(args, "--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(r.cfg.Dir, "nodes.conf"),
			"--cluster-node-timeout", "2000")
		if r.cfg.TLS != nil {
			// Nodes dial each other as TLS clients: with the client
			// certificate (the server's is for server auth only).
			args = append(args, "--tls-cluster", "yes", "--tls-replication", "yes",
				"--tls-client-cert-file", r.cfg.TLS.ClientCert, "--tls-client-key-file", r.cfg.TLS.ClientKey)
		}
	}
	cmd := exec.Command("redis-server", args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("localserver: start redis-server: %w", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	r.cmd, r.done = cmd, done
	c := redis.NewClient(&redis.Options{Addr: r.Addr, MaxRetries: -1, ContextTimeoutEnabled: true})
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
			b, _ := os.ReadFile(filepath.Join(r.cfg.Dir, "redis.log"))
			return fmt.Errorf("localserver: redis-server exited during start-up: %s", b)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("localserver: redis-server did not answer PING within 20s: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop shuts the server down (saving a snapshot when Persist).
func (r *Redis) Stop() { r.signal(syscall.SIGTERM) }

// Kill kills the server with SIGKILL.
func (r *Redis) Kill() { r.signal(syscall.SIGKILL) }

func (r *Redis) signal(sig syscall.Signal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return
	}
	signalWait(r.cmd, r.done, sig, false, 10*time.Second)
	r.cmd = nil
}

// Remove kills the server and deletes its directory.
func (r *Redis) Remove() {
	r.Kill()
	os.RemoveAll(r.cfg.Dir)
}

// Pid is the server's process id (0 when it is not running), for faults
// such as SIGSTOP.
func (r *Redis) Pid() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return 0
	}
	return r.cmd.Process.Pid
}

// Dir is the server's working directory (log, dump.rdb).
func (r *Redis) Dir() string { return r.cfg.Dir }
