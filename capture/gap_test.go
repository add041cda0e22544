package capture_test

import (
	"context"
	"testing"
	"time"

	"github.com/tidemark/tidemark/capture"
	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/relay"
	"github.com/tidemark/tidemark/schema"
)

// resets lists each partition's reset markers but the first start's
// cold_start one (TestGapResets checks that).
func resets(recs []record) map[int32][]*schema.Reset {
	return resetsWith(recs, func(r *schema.Reset) bool { return r.Reason != capture.ReasonColdStart })
}

func resetsWith(recs []record, keep func(*schema.Reset) bool) map[int32][]*schema.Reset {
	m := map[int32][]*schema.Reset{}
	for _, r := range recs {
		if ev, ok := r.ev.(*schema.Reset); ok && keep(ev) {
			if p, ok := schema.ParseMarkerKey(r.key); !ok || p != r.partition {
				panic("reset marker with a wrong key")
			}
			m[r.partition] = append(m[r.partition], ev)
		}
	}
	return m
}

func waitItem(t *testing.T, k *testenv.Kafka, topic, tenant, item string, version int64) []record {
	t.Helper()
	var recs []record
	testenv.Eventually(t, 60*time.Second, "item in topic", func() error {
		recs = readTopic(t, k.Brokers, topic)
		return joinErr(missing(recs, []kv{{schema.Key(tenant, item), version}}))
	})
	return recs
}

// A first start sends a cold_start reset, timed after the slot exists (a
// value read from the source before then may predate a commit the slot
// never carries); a clean restart with the slot present sends no reset; a
// dropped slot while the topic has history, or a different Postgres
// (system identifier), sends a reset marker to every partition.
func TestGapResets(t *testing.T) {
	t.Parallel()
	pg := testenv.SharedPostgres(t)
	dsn, k, cfg := newRig(t, pg)
	conn := connect(t, dsn)

	// Committed before the slot exists: no change record will carry it.
	exec(t, conn, "INSERT INTO catalog.items (tenant_id, item_id, version) VALUES ('t', 'early', 1)")
	var committed time.Time
	if err := conn.QueryRow(context.Background(), "SELECT clock_timestamp()").Scan(&committed); err != nil {
		t.Fatal(err)
	}
	r := start(t, cfg)
	r.waitReady(t)
	exec(t, conn, "INSERT INTO catalog.items (tenant_id, item_id, version) VALUES ('t', 'a', 1)")
	recs := waitItem(t, k, cfg.Relay.Topic, "t", "a", 1)
	var created time.Time
	if err := conn.QueryRow(context.Background(), "SELECT clock_timestamp()").Scan(&created); err != nil {
		t.Fatal(err)
	}
	cold := resetsWith(recs, func(*schema.Reset) bool { return true })
	for p := range int32(testPartitions) {
		if len(cold[p]) != 1 || cold[p][0].Reason != capture.ReasonColdStart || !cold[p][0].ResetTime.After(committed) || cold[p][0].ResetTime.After(created) {
			t.Fatalf("partition %d: resets %+v, want one %s reset after the commit made before the slot existed (%s) and before %s",
				p, cold[p], capture.ReasonColdStart, committed.Format(time.RFC3339Nano), created.Format(time.RFC3339Nano))
		}
	}
	if got := testenv.Metric(t, r.reg, "tidemark_capture_resets_total", "reason", capture.ReasonColdStart); got != 1 {
		t.Fatalf("resets_total{reason=cold_start} = %v, want 1", got)
	}
	if err := r.wait(t); err != nil {
		t.Fatalf("Run: %v", err)
	}

	// Clean restart: no reset.
	r = start(t, cfg)
	r.waitReady(t)
	exec(t, conn, "INSERT INTO catalog.items (tenant_id, item_id, version) VALUES ('t', 'b', 1)")
	recs = waitItem(t, k, cfg.Relay.Topic, "t", "b", 1)
	if n := len(resets(recs)); n != 0 || testenv.Metric(t, r.reg, "tidemark_capture_resets_total") != 0 {
		t.Fatalf("clean restart sent resets on %d partitions", n)
	}
	_ = r.wait(t)

	// Slot dropped: the change made meanwhile is lost, so a reset must follow.
	exec(t, conn, "SELECT pg_drop_replication_slot($1)", cfg.Slot)
	exec(t, conn, "INSERT INTO catalog.items (tenant_id, item_id, version) VALUES ('t', 'lost', 1)")
	before := time.Now()
	r = start(t, cfg)
	r.waitReady(t)
	exec(t, conn, "INSERT INTO catalog.items (tenant_id, item_id, version) VALUES ('t', 'c', 1)")
	recs = waitItem(t, k, cfg.Relay.Topic, "t", "c", 1)
	rs := resets(recs)
	for p := range int32(testPartitions) {
		if len(rs[p]) != 1 || rs[p][0].Reason != capture.ReasonSlotMissing || rs[p][0].ResetTime.Before(before.Add(-time.Second)) {
			t.Fatalf("partition %d: resets %+v, want one %s reset after %s", p, rs[p], capture.ReasonSlotMissing, before)
		}
	}
	if got := testenv.Metric(t, r.reg, "tidemark_capture_resets_total", "reason", capture.ReasonSlotMissing); got != 1 {
		t.Fatalf("resets_total{reason=slot_missing} = %v, want 1", got)
	}
	_ = r.wait(t)

	// A different server (simulated by a stored identity that differs).
	p, err := relay.New(cfg.Relay, relay.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	st, found, err := p.LoadState(context.Background(), cfg.Slot)
	if err != nil || !found || st.SystemID == "" {
		t.Fatalf("stored state: %+v %v %v", st, found, err)
	}
	st.SystemID = "1"
	if err := p.SaveState(context.Background(), cfg.Slot, st); err != nil {
		t.Fatal(err)
	}
	p.Close()
	r = start(t, cfg)
	r.waitReady(t)
	exec(t, conn, "INSERT INTO catalog.items (tenant_id, item_id, version) VALUES ('t', 'd', 1)")
	recs = waitItem(t, k, cfg.Relay.Topic, "t", "d", 1)
	rs = resets(recs)
	for p := range int32(testPartitions) {
		if len(rs[p]) != 2 || rs[p][1].Reason != capture.ReasonSystemIDChanged {
			t.Fatalf("partition %d: resets %+v, want a second one for %s", p, rs[p], capture.ReasonSystemIDChanged)
		}
	}
}

// Writes only to a table outside the publication: the slot's
// confirmed_flush_lsn still advances (keepalive WAL end is confirmed when
// nothing is in flight), so an idle catalog retains no WAL.
func TestIdleSlotAdvances(t *testing.T) {
	t.Parallel()
	pg := testenv.SharedPostgres(t)
	dsn, _, cfg := newRig(t, pg)
	conn := connect(t, dsn)
	exec(t, conn, "CREATE TABLE public.other (x int)")
	// Heartbeats would advance it too (after the one at start, before the
	// writes): prove keepalives do.
	r := startWith(t, cfg, capture.Deps{HeartbeatTicks: make(chan time.Time)}, nil)
	r.waitReady(t)
	exec(t, conn, "INSERT INTO public.other SELECT generate_series(1, 1000)")
	var target string
	if err := conn.QueryRow(context.Background(), "SELECT pg_current_wal_lsn()::text").Scan(&target); err != nil {
		t.Fatal(err)
	}
	want, _ := schema.ParseLSN(target)
	testenv.Eventually(t, 30*time.Second, "confirmed_flush_lsn past the other table's writes", func() error {
		exec(t, conn, "INSERT INTO public.other VALUES (1)")
		if got := slotLSN(t, conn, cfg.Slot); got < want {
			return errorf("confirmed_flush_lsn %s < %s", got, want)
		}
		// Checked in the loop: Postgres 18 may move confirmed_flush_lsn of
		// an idle slot on its own before capture's next status goes out.
		if got := testenv.Metric(t, r.reg, "tidemark_capture_confirmed_lsn_bytes"); schema.LSN(got) < want {
			return errorf("tidemark_capture_confirmed_lsn_bytes %v < %s", got, want)
		}
		return nil
	})
}

// A slot that lost WAL it still needed (max_slot_wal_keep_size) can never
// stream again: capture sends a slot_lost reset to every partition,
// recreates the slot and carries on.
func TestSlotLostResets(t *testing.T) {
	t.Parallel()
	pg := testenv.StartPostgres(t, testenv.PGConf("max_slot_wal_keep_size", "1MB"), testenv.PGConf("wal_keep_size", "0"))
	dsn, k, cfg := newRig(t, pg)
	conn := connect(t, dsn)
	r := start(t, cfg)
	r.waitReady(t)
	exec(t, conn, "INSERT INTO catalog.items (tenant_id, item_id, version) VALUES ('t', 'a', 1)")
	waitItem(t, k, cfg.Relay.Topic, "t", "a", 1)
	_ = r.wait(t)

	testenv.Eventually(t, 30*time.Second, "slot lost", func() error {
		exec(t, conn, "INSERT INTO catalog.items (tenant_id, item_id, version) SELECT 'fill', 'f' || g, 1 FROM generate_series(1, 2000) g ON CONFLICT (tenant_id, item_id) DO UPDATE SET version = catalog.items.version + 1")
		exec(t, conn, "SELECT pg_switch_wal()")
		exec(t, conn, "CHECKPOINT")
		var status string
		if err := conn.QueryRow(context.Background(), "SELECT wal_status FROM pg_replication_slots WHERE slot_name = $1", cfg.Slot).Scan(&status); err != nil {
			return err
		}
		if status != "lost" {
			return errorf("wal_status %q", status)
		}
		return nil
	})
	r = start(t, cfg)
	r.waitReady(t)
	exec(t, conn, "INSERT INTO catalog.items (tenant_id, item_id, version) VALUES ('t', 'after', 1)")
	rs := resets(waitItem(t, k, cfg.Relay.Topic, "t", "after", 1))
	for p := range int32(testPartitions) {
		if len(rs[p]) != 1 || rs[p][0].Reason != capture.ReasonSlotLost {
			t.Fatalf("partition %d: resets %+v, want one %s", p, rs[p], capture.ReasonSlotLost)
		}
	}
	if got := testenv.Metric(t, r.reg, "tidemark_capture_resets_total", "reason", capture.ReasonSlotLost); got != 1 {
		t.Fatalf("resets_total{reason=slot_lost} = %v", got)
	}
}
