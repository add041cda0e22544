package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/schema"
)

// serve reads the freshness watermark W for its promise, so it exports its
// age under the name the freshness alerts read (with the same pipeline
// labels as the applier's): the alerts keep working while only serve is
// scraped, and the gauge grows when W stalls.
func TestServeExportsTheWatermarkAge(t *testing.T) {
	ctx := testenv.Context(t, 180*time.Second)
	dsn := testenv.SharedPostgres(t).MigratedDatabase(t)
	r := testenv.StartRedis(t)
	rdb := r.Client(t)
	key := schema.WatermarkKey("catalog")
	setW := func(ts time.Time) {
		t.Helper()
		if err := rdb.HSet(ctx, key, schema.FieldPartitions, 1, schema.WatermarkField(0), ts.UnixMilli()).Err(); err != nil {
			t.Fatal(err)
		}
	}
	setW(time.Now())

	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var logs bytes.Buffer
	exited := make(chan int, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		var o bytes.Buffer
		exited <- run(rctx, []string{"serve", "--pg", dsn, "--redis", r.URL(), "--addr", addr, "--metrics-addr", metricsAddr,
			"--audit-rate", "0", "--warm-top", "0"}, &o, &logs)
	}()
	defer func() { cancel(); wg.Wait() }()

	line := regexp.MustCompile(`(?m)^tidemark_watermark_age_seconds\{([^}]*)\} (\S+)$`)
	client := &http.Client{Timeout: 5 * time.Second}
	age := func() (float64, string, error) {
		select {
		case code := <-exited:
			t.Fatalf("serve exited %d:\n%s", code, logs.String())
		default:
		}
		resp, err := client.Get("http://" + metricsAddr + "/metrics")
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		m := line.FindSubmatch(b)
		if m == nil {
			return 0, "", fmt.Errorf("serve's /metrics has no tidemark_watermark_age_seconds")
		}
		v, err := strconv.ParseFloat(string(m[2]), 64)
		return v, string(m[1]), err
	}
	var labels string
	testenv.Eventually(t, 60*time.Second, "serve exports a fresh watermark age", func() error {
		setW(time.Now())
		v, l, err := age()
		if err != nil {
			return err
		}
		if v < 0 || v > 2 {
			return fmt.Errorf("tidemark_watermark_age_seconds = %v with W kept current, want under 2 s", v)
		}
		labels = l
		return nil
	})
	for _, want := range []string{`cache_namespace="catalog"`, `topic="tidemark.invalidations"`} {
		if !regexp.MustCompile(regexp.QuoteMeta(want)).MatchString(labels) {
			t.Errorf("tidemark_watermark_age_seconds{%s} lacks %s (the applier's labels)", labels, want)
		}
	}
	// W stalls: the age grows with the wall clock.
	stalled := time.Now()
	setW(stalled)
	testenv.Eventually(t, 60*time.Second, "serve's watermark age grows while W stalls", func() error {
		v, _, err := age()
		if err != nil {
			return err
		}
		if since := time.Since(stalled).Seconds(); v < 3 || v > since+1 {
			return fmt.Errorf("tidemark_watermark_age_seconds = %v, %.1f s after W stalled", v, since)
		}
		return nil
	})
	v, _, _ := age()
	t.Logf("serve's /metrics: tidemark_watermark_age_seconds{%s} %v after W stalled", labels, v)
}
