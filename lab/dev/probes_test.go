package dev

import (
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/tidemark/tidemark/lab/testenv"
)

// healthcheck runs `tidemark healthcheck --url` (the exec probe of the
// shell-less image) and returns its error (exit 1 on a non-2xx answer).
func healthcheck(t *testing.T, url string) error {
	out, err := exec.Command(testenv.Binary(t), "healthcheck", "--url", url).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	return nil
}

// TestServeProbes: a real serve process stays ready while Postgres is down
// and the cache answers; is not ready when neither answers; and on SIGTERM
// fails /readyz at once while its API keeps answering for --shutdown-delay.
func TestServeProbes(t *testing.T) {
	t.Parallel()
	pg := testenv.StartPostgres(t)
	r := testenv.StartRedis(t)
	dsn := pg.MigratedDatabase(t)
	apiAddr, metricsAddr := freeAddr(t), freeAddr(t)
	const delay = 4 * time.Second
	serve := &proc{t: t, name: "serve", args: []string{"serve", "--pg", dsn, "--redis", r.URL(), "--addr", apiAddr,
		"--metrics-addr", metricsAddr, "--shutdown-delay", delay.String(), "--audit-rate", "0", "--warm-top", "0"}}
	serve.start()
	t.Cleanup(serve.kill)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- serve output ---\n%s", serve.output())
		}
	})
	readyz, healthz := "http://"+metricsAddr+"/readyz", "http://"+metricsAddr+"/healthz"
	testenv.Eventually(t, 60*time.Second, "serve ready (healthcheck exit 0)", func() error { return healthcheck(t, readyz) })

	// Postgres down, the cache up: still ready, for as long as we look.
	pg.Stop()
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if err := healthcheck(t, readyz); err != nil {
			t.Fatalf("serve not ready while the cache answers and only Postgres is down: %v", err)
		}
	}
	// Neither answers: not ready; still alive.
	r.Stop()
	testenv.Eventually(t, 30*time.Second, "serve not ready with Redis and Postgres down", func() error {
		if healthcheck(t, readyz) == nil {
			return errors.New("/readyz still 200")
		}
		return nil
	})
	if err := healthcheck(t, healthz); err != nil {
		t.Fatalf("/healthz failed while only the servers it talks to are down: %v", err)
	}

	// SIGTERM: /readyz fails at once, the API keeps its listener for the
	// delay (any HTTP answer shows the listener is open).
	if err := pg.Start(); err != nil {
		t.Fatal(err)
	}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "serve ready again", func() error { return healthcheck(t, readyz) })
	serve.signal(syscall.SIGTERM)
	termAt := time.Now()
	testenv.Eventually(t, 2*time.Second, "/readyz fails after SIGTERM", func() error {
		if healthcheck(t, readyz) == nil {
			return errors.New("/readyz still 200")
		}
		return nil
	})
	for time.Since(termAt) < delay-time.Second {
		resp, err := http.Get("http://" + apiAddr + "/v1/openapi.json")
		if err != nil {
			t.Fatalf("API listener closed %s after SIGTERM, within the %s shutdown delay: %v", time.Since(termAt).Round(time.Millisecond), delay, err)
		}
		resp.Body.Close()
		time.Sleep(200 * time.Millisecond)
	}
	testenv.Eventually(t, 30*time.Second, "API listener closes after the delay", func() error {
		resp, err := http.Get("http://" + apiAddr + "/v1/openapi.json")
		if err == nil {
			resp.Body.Close()
			return errors.New("API still answers")
		}
		return nil
	})
}
