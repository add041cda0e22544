package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/tidemark/tidemark/lab/testenv"
)

// inProcessServe is `tidemark serve` run in the test's own process (run, as
// main calls it) on free API and metrics addresses, stopped when the test
// ends. The process tests of serve's status page and metrics use it.
type inProcessServe struct {
	t           *testing.T
	addr        string // API
	metricsAddr string
	logs        bytes.Buffer // written by serve until exited has its code
	exited      chan int
	client      *http.Client
}

// startServe runs serve with args after --addr and --metrics-addr.
func startServe(t *testing.T, ctx context.Context, args ...string) *inProcessServe {
	t.Helper()
	s := &inProcessServe{
		t:           t,
		addr:        fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)),
		metricsAddr: fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)),
		exited:      make(chan int, 1),
		client:      &http.Client{Timeout: 5 * time.Second},
	}
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		var o bytes.Buffer
		s.exited <- run(rctx, append([]string{"serve", "--addr", s.addr, "--metrics-addr", s.metricsAddr}, args...), &o, &s.logs)
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
	return s
}

// get reads path of the metrics address; a serve that has exited fails the
// test with its logs.
func (s *inProcessServe) get(path string) (int, string, error) {
	select {
	case code := <-s.exited:
		s.t.Fatalf("serve exited %d:\n%s", code, s.logs.String())
	default:
	}
	resp, err := s.client.Get("http://" + s.metricsAddr + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}
