// Package localserver runs private Postgres and Redis server processes from
// the installed binaries, for `tidemark-lab dev`, the benchmarks and (through
// lab/testenv) the tests. It is not a way to run production servers.
package localserver

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Servers get ports below the kernel's ephemeral range. A port found by
// binding to port 0 comes from that range, and between our probe and the
// server's own bind the kernel may hand it to any outgoing connection or to
// another process's probe: a test's Kafka node once lost its port that way.
// A random port below the range is never chosen by the kernel, and two
// processes seldom pick the same one.
const portFloor = 10000

// clusterBusOffset is where a Redis Cluster node's bus listens, relative to
// its port.
const clusterBusOffset = 10000

var (
	portsMu sync.Mutex
	given   = map[int]bool{} // ports this process already handed out
)

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago, chosen
// at random below the ephemeral range and never the same one twice in a
// process.
func FreePort() (int, error) { return freePort(0) }

// freePort is FreePort for a server that also listens on port+offset (a
// Redis Cluster node's bus): both are free and below the ephemeral range.
func freePort(offset int) (int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	hi := ephemeralLow() - offset
	if hi-portFloor < 1000 {
		return 0, fmt.Errorf("localserver: find a free port: fewer than 1000 ports below the ephemeral range (from %d)", hi+offset)
	}
	var last error
	for range 200 {
		p := portFloor + rand.IntN(hi-portFloor)
		if given[p] || given[p+offset] {
			continue
		}
		ok := true
		for _, q := range []int{p, p + offset} {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(q))
			if err != nil {
				ok, last = false, err
				break
			}
			l.Close()
		}
		if ok {
			given[p], given[p+offset] = true, true
			return p, nil
		}
	}
	return 0, fmt.Errorf("localserver: find a free port: 200 tries below %d: %w", hi+offset, last)
}

// ephemeralLow is the first port of the kernel's ephemeral range (32768 if
// it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	n, err := strconv.Atoi(f[0])
	if err != nil || n <= portFloor {
		return 32768
	}
	return n
}

func dialTCP(addr string) (net.Conn, error) {
	return net.DialTimeout("tcp", addr, time.Second)
}

// signalWait sends sig to cmd (to its whole process group when group) and
// waits for it to exit (done closes then), killing the group with SIGKILL
// after grace.
func signalWait(cmd *exec.Cmd, done <-chan struct{}, sig syscall.Signal, group bool, grace time.Duration) {
	if group {
		syscall.Kill(-cmd.Process.Pid, sig)
	} else {
		cmd.Process.Signal(sig)
	}
	select {
	case <-done:
	case <-time.After(grace):
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}
