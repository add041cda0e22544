package dev

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/schema"
	"github.com/tidemark/tidemark/status"
)

// TestGrowTopicWhileRunning grows the topic from 6 to 9 partitions with the
// admin API's create-partitions while capture, apply and serve run and
// merchants write, as an operator would. Without restarting anything,
// status must be OK again with a watermark on every partition within the
// SLO of the growth, changes must have gone to the new partitions, and
// every change must be applied. On real Kafka with TIDEMARK_TEST_KAFKA=real
// (make test-kafka).
func TestGrowTopicWhileRunning(t *testing.T) {
	t.Parallel()
	e := newE2E(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var (
		wg      sync.WaitGroup
		updates atomic.Int64
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			tenant := demoTenants[rand.N(len(demoTenants))]
			if _, err := e.pool.Exec(ctx, `UPDATE catalog.items SET version = version + 1, updated_at = now() WHERE tenant_id = $1 AND item_id = $2`,
				tenant, randomItem()); err == nil {
				updates.Add(1)
			}
		}
	}()
	testenv.Eventually(t, time.Minute, "500 updates before the growth", func() error {
		if n := updates.Load(); n < 500 {
			return fmt.Errorf("%d updates", n)
		}
		return nil
	})

	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(e.brokers, ",")...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	actx := testenv.Context(t, time.Minute)
	resp, err := adm.CreatePartitions(actx, 3, e.topic)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("create partitions: %v", err)
	}
	grownAt := time.Now()
	t.Logf("grew %s from 6 to 9 partitions after %d updates", e.topic, updates.Load())

	// Merchants keep writing for 8 s after the growth while status is
	// watched: healthy again within the SLO of the growth, with every
	// partition marked. A partition without a watermark is reported
	// pending (AT RISK) meanwhile, never BREACHED.
	const bound = 30 * time.Second
	var seen []string
	for {
		if ctx.Err() == nil && time.Since(grownAt) > 8*time.Second {
			cancel()
			wg.Wait()
		}
		rep, err := e.status(5*time.Second, 30*time.Second)
		if err != nil {
			t.Fatalf("status: %v", err)
		}
		if len(seen) == 0 || seen[len(seen)-1] != rep.Verdict {
			seen = append(seen, rep.Verdict)
			t.Logf("%s after the growth: %s: %s", time.Since(grownAt).Round(100*time.Millisecond), rep.Verdict, rep.Reason)
		}
		marked := 0
		for _, p := range rep.Partitions {
			if p.WatermarkAgeS != nil {
				marked++
			}
		}
		if rep.Verdict == status.Breached {
			t.Fatalf("status BREACHED %s after the growth (want pending, then OK): %s", time.Since(grownAt).Round(100*time.Millisecond), rep.Reason)
		}
		if ctx.Err() != nil && rep.Verdict == status.OK && len(rep.Partitions) == 9 && marked == 9 {
			t.Logf("status OK with a watermark on all 9 partitions %s after the growth", time.Since(grownAt).Round(100*time.Millisecond))
			break
		}
		if time.Since(grownAt) > bound {
			t.Fatalf("%s after the growth status is %s with %d of %d partitions marked (want OK, all 9 marked, within %s): %s",
				time.Since(grownAt).Round(100*time.Millisecond), rep.Verdict, marked, len(rep.Partitions), bound, rep.Reason)
		}
		time.Sleep(500 * time.Millisecond)
	}

	// Changes went to the new partitions (else the test proves nothing),
	// and every change is applied.
	ends, err := adm.ListEndOffsets(actx, e.topic)
	if err != nil {
		t.Fatal(err)
	}
	items := map[int32]int{}
	offs := map[int32]kgo.Offset{}
	for p := int32(6); p < 9; p++ {
		offs[p] = kgo.NewOffset().AtStart()
	}
	rd, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(e.brokers, ",")...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{e.topic: offs}))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	left := map[int32]int64{}
	for p := int32(6); p < 9; p++ {
		if o, ok := ends.Lookup(e.topic, p); ok && o.Offset > 0 {
			left[p] = o.Offset
		}
	}
	for len(left) > 0 && actx.Err() == nil {
		fs := rd.PollFetches(actx)
		fs.EachRecord(func(r *kgo.Record) {
			if !schema.IsMarkerKey(string(r.Key)) {
				items[r.Partition]++
			}
			if r.Offset >= left[r.Partition]-1 {
				delete(left, r.Partition)
			}
		})
	}
	for p := int32(6); p < 9; p++ {
		if items[p] < 5 {
			t.Fatalf("partition %d holds %d change records after the growth (want changes placed there): %v", p, items[p], items)
		}
	}
	t.Logf("change records on the new partitions: %v", items)
	e.floorsMatchSource(time.Minute)
	if e.capture.process().Exited() {
		t.Fatalf("capture exited during the test:\n%s", e.capture.output())
	}
	t.Logf("%d updates, verdicts %v", updates.Load(), seen)
}
