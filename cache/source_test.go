package cache_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/schema"
)

// Two deployments' captures on one topic: the appliers of one namespace
// set its watermark from the other's resolved markers too. The hash
// records each partition watermark's source; a marker of another source
// replaces the watermark even when it is lower (it vouches for its own
// stream only); and a client told its own source trusts W only where
// every partition's is its own, unknown before it was told. Fails with
// judgeSource returning wm as it is, and with the script's source branch
// taken out (the foreign marker would not show).
func TestWatermarkOfAnotherSourceIsNotTrusted(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		cfg := testConfig()
		cfg.Namespace = testenv.Unique(t, "ns")
		writer, ctx := newClient(t, b, cfg), context.Background()
		serve := newClient(t, b, cfg)
		const own, other = "7001/catalog/catalog.items", "7002/catalog/catalog.items"
		serve.ExpectSource()
		runPoller(t, serve)
		must := func(err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		t0 := time.Now().Add(-time.Second).Truncate(time.Millisecond)
		must(writer.SetPartitions(ctx, 2))
		must(writer.SetWatermarkFrom(ctx, 0, t0, "", own))
		must(writer.SetWatermarkFrom(ctx, 1, t0, "", own))
		known := func(want bool, what string) cache.Watermark {
			t.Helper()
			var wm cache.Watermark
			testenv.Eventually(t, 5*time.Second, what, func() error {
				wm = serve.Watermark()
				if wm.Known != want || time.Since(wm.ReadAt) > time.Second {
					return fmt.Errorf("watermark %+v, want known %v", wm, want)
				}
				return nil
			})
			return wm
		}
		// Told nothing yet: nothing vouches.
		set := time.Now()
		testenv.Eventually(t, 5*time.Second, "a poll after the watermarks were set", func() error {
			if !serve.Watermark().ReadAt.After(set) {
				return fmt.Errorf("last poll at %s", serve.Watermark().ReadAt)
			}
			return nil
		})
		if wm := serve.Watermark(); wm.Known {
			t.Fatalf("before its source was set the client trusted %+v", wm)
		}
		serve.SetSource(own)
		known(true, "W of its own source")

		// The other deployment's marker, older than the stored watermark:
		// it replaces it, and the source with it.
		must(writer.SetWatermarkFrom(ctx, 1, t0.Add(-500*time.Millisecond), "", other))
		h := b.rdb.HGetAll(ctx, schema.WatermarkKey(cfg.Namespace)).Val()
		if h[schema.WatermarkSourceField(1)] != other || h["p1"] != fmt.Sprint(t0.Add(-500*time.Millisecond).UnixMilli()) {
			t.Fatalf("after another source's marker on p1 the hash holds %v", h)
		}
		wm := known(false, "W unknown with p1 set by another source")
		if f := wm.Foreign; f == nil || f.Partition != 1 || f.Source != other || f.Own != own {
			t.Fatalf("foreign watermark = %+v", f)
		}
		// A client that does not judge sources (an operator's own, status)
		// reads it as before.
		if wm, err := writer.ReadWatermark(ctx); err != nil || !wm.Known || wm.Sources[1] != other {
			t.Fatalf("ReadWatermark = %+v, %v", wm, err)
		}
		// This deployment's capture back: its next marker replaces p1 again.
		must(writer.SetWatermarkFrom(ctx, 1, t0, "", own))
		known(true, "W of its own source again")
		// A marker naming no source (an older capture) is not judged.
		must(writer.SetWatermarkFrom(ctx, 0, t0.Add(time.Millisecond), "", ""))
		known(true, "W after a marker naming no source")
	})
}
