package main

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/catalog"
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

	srv := startServe(t, ctx, "--pg", dsn, "--redis", r.URL(), "--audit-rate", "0", "--warm-top", "0")

	line := regexp.MustCompile(`(?m)^tidemark_watermark_age_seconds\{([^}]*)\} (\S+)$`)
	age := func() (float64, string, error) {
		_, b, err := srv.get("/metrics")
		if err != nil {
			return 0, "", err
		}
		m := line.FindStringSubmatch(b)
		if m == nil {
			return 0, "", fmt.Errorf("serve's /metrics has no tidemark_watermark_age_seconds")
		}
		v, err := strconv.ParseFloat(m[2], 64)
		return v, m[1], err
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

	// A partition's watermark set by another source's marker (two
	// deployments on one topic): W vouches for nothing, the age is +Inf;
	// this source's own marker makes it current again.
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	own, err := catalog.DefaultTable().Source(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		source string
		known  bool
	}{{"7777/other/catalog.items", false}, {own, true}} {
		testenv.Eventually(t, 60*time.Second, fmt.Sprintf("serve's watermark with p0 from %s", c.source), func() error {
			if err := rdb.HSet(ctx, key, schema.WatermarkField(0), time.Now().UnixMilli(), schema.WatermarkSourceField(0), c.source).Err(); err != nil {
				return err
			}
			v, _, err := age()
			if err != nil {
				return err
			}
			if known := !math.IsInf(v, 1); known != c.known || (known && v > 2) {
				return fmt.Errorf("tidemark_watermark_age_seconds = %v, want it known: %v", v, c.known)
			}
			return nil
		})
	}
}
