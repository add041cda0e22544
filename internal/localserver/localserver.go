// Package localserver runs private Postgres and Redis server processes from
// the installed binaries, for `tidemark dev`, the benchmarks and (through
// internal/testenv) the tests. It is not a way to run production servers.
package localserver

import (
	"fmt"
	"net"
	"os/exec"
	"syscall"
	"time"
)

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("localserver: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
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
