package capture_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tidemark/tidemark/capture"
	"github.com/tidemark/tidemark/lab/proc"
	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/schema"
)

// workload commits single-row updates of random keys until stopped and
// remembers every committed (key, version).
type workload struct {
	stop      chan struct{}
	wg        sync.WaitGroup
	mu        sync.Mutex
	committed []kv
}

func startWorkload(t *testing.T, dsn string, keys int) *workload {
	t.Helper()
	setup := connect(t, dsn)
	exec(t, setup, `INSERT INTO catalog.items (tenant_id, item_id, version)
		SELECT 'w', 'k' || i, 1 FROM generate_series(0, $1 - 1) i`, keys)
	w := &workload{stop: make(chan struct{})}
	conn := connect(t, dsn)
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		rng := rand.New(rand.NewPCG(7, 7))
		for {
			select {
			case <-w.stop:
				return
			default:
			}
			i := rng.IntN(keys)
			var v int64
			err := conn.QueryRow(context.Background(), `UPDATE catalog.items SET version = version + 1 WHERE tenant_id = 'w' AND item_id = $1 RETURNING version`,
				fmt.Sprintf("k%d", i)).Scan(&v)
			if err != nil {
				t.Errorf("workload: %v", err)
				return
			}
			w.mu.Lock()
			w.committed = append(w.committed, kv{schema.Key("w", fmt.Sprintf("k%d", i)), v})
			w.mu.Unlock()
			time.Sleep(time.Millisecond)
		}
	}()
	t.Cleanup(w.finish)
	return w
}

func (w *workload) finish() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	w.wg.Wait()
}

func (w *workload) all() []kv {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]kv(nil), w.committed...)
}

func waitAll(t *testing.T, k *testenv.Kafka, topic string, want []kv) {
	t.Helper()
	testenv.Eventually(t, 90*time.Second, "every committed version in the topic", func() error {
		return joinErr(missing(readTopic(t, k.Brokers, topic), want))
	})
}

// Capture is killed at random points while a workload runs (no flush, no
// final status), and once loses its replication connection; after
// restarts, nothing committed is missing (duplicates are allowed).
func TestCrashSafetyInProcess(t *testing.T) {
	t.Parallel()
	pg := testenv.SharedPostgres(t)
	dsn, k, cfg := newRig(t, pg)
	cfg.Relay.MaxInflight = 50 // keep records in flight at the crash
	conn := connect(t, dsn)
	// The slot exists before the first change: everything after it counts.
	exec(t, conn, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", cfg.Slot)
	w := startWorkload(t, dsn, 50)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 4 {
		r := start(t, cfg)
		r.waitReady(t)
		if i == 1 {
			// Postgres connection lost: Run reconnects and resumes from the slot.
			exec(t, conn, "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1", cfg.Slot)
			r.waitReady(t)
		}
		time.Sleep(time.Duration(200+rng.IntN(1200)) * time.Millisecond)
		capture.Crash(r.c, r.stop)
		_ = r.wait(t)
	}
	w.finish()
	committed := w.all()
	if len(committed) < 100 {
		t.Fatalf("workload committed only %d changes", len(committed))
	}
	r := start(t, cfg)
	r.waitReady(t)
	waitAll(t, k, cfg.Relay.Topic, committed)
}

// While Kafka refuses every produce, the slot's confirmed_flush_lsn must not
// move past what Kafka holds; once Kafka recovers, everything arrives and
// the slot moves on.
func TestKafkaFailureHoldsConfirm(t *testing.T) {
	t.Parallel()
	pg := testenv.SharedPostgres(t)
	dsn := pg.MigratedDatabase(t)
	k := testenv.StartKfake(t) // injects produce faults
	cfg := testConfig(t, dsn, k)
	conn := connect(t, dsn)
	r := start(t, cfg)
	r.waitReady(t)
	exec(t, conn, "INSERT INTO catalog.items (tenant_id, item_id, version) VALUES ('t', 'before', 1)")
	waitItem(t, k, cfg.Relay.Topic, "t", "before", 1)

	fault := k.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.NotLeaderForPartition, Count: -1})
	exec(t, conn, "INSERT INTO catalog.items (tenant_id, item_id, version) VALUES ('t', 'during', 1)")
	// Watch the slot while Kafka refuses; judge it once the record's own
	// commit LSN is known. Positions before that commit (a heartbeat
	// message logged meanwhile) may be confirmed; the commit itself not.
	var maxSeen schema.LSN
	deadline := time.Now().Add(4 * time.Second)
	for time.Now().Before(deadline) {
		maxSeen = max(maxSeen, slotLSN(t, conn, cfg.Slot))
		time.Sleep(100 * time.Millisecond)
	}
	if fault.Hits() == 0 {
		t.Fatal("the produce fault never hit")
	}
	if len(missing(readTopic(t, k.Brokers, cfg.Relay.Topic), []kv{{schema.Key("t", "during"), 1}})) == 0 {
		t.Fatal("record arrived despite the fault")
	}
	fault.Remove()
	var held schema.LSN
	for _, r := range waitItem(t, k, cfg.Relay.Topic, "t", "during", 1) {
		if c, ok := r.ev.(*schema.Change); ok && c.Item == "during" {
			held = c.LSN // the commit record's start: its end is what a confirm would name
		}
	}
	if maxSeen > held {
		t.Fatalf("confirmed_flush_lsn reached %s, past the commit at %s, while Kafka refused that transaction", maxSeen, held)
	}
	testenv.Eventually(t, 20*time.Second, "slot advances after Kafka recovers", func() error {
		if got := slotLSN(t, conn, cfg.Slot); got <= held {
			return errorf("confirmed_flush_lsn %s", got)
		}
		return nil
	})
}

// binary runs `tidemark capture` as a real process.
type binary struct {
	*proc.Process
	addr string
}

func startBinary(t *testing.T, cfg capture.Config, extra ...string) *binary {
	t.Helper()
	addr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	args := append([]string{"capture", "--pg", cfg.PG, "--kafka", cfg.Relay.Brokers[0], "--topic", cfg.Relay.Topic, "--slot", cfg.Slot,
		"--partitions", strconv.Itoa(cfg.Relay.Partitions), "--heartbeat", cfg.Heartbeat.String(), "--metrics-addr", addr}, extra...)
	b := &binary{Process: proc.New(proc.Config{Name: "capture", Bin: testenv.Binary(t), Args: args}), addr: addr}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("capture %s output:\n%s", addr, b.Tail(4000))
		}
		b.Kill()
	})
	return b
}

func (b *binary) ready() error {
	resp, err := http.Get("http://" + b.addr + "/readyz")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return errorf("readyz %d", resp.StatusCode)
	}
	return nil
}

func (b *binary) metrics(t *testing.T) string {
	t.Helper()
	text, err := b.scrape()
	if err != nil {
		t.Fatal(err)
	}
	return text
}

func (b *binary) scrape() (string, error) {
	resp, err := http.Get("http://" + b.addr + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return string(body), err
}

// metric is the value of a metric with one series (-1 if absent or unreadable).
func (b *binary) metric(name string) float64 {
	text, _ := b.scrape()
	for _, line := range strings.Split(text, "\n") {
		// Every series carries the process's const labels (cache_namespace,
		// topic), so an unlabelled metric is name{...} value.
		if f := strings.Fields(line); len(f) == 2 && (f[0] == name || strings.HasPrefix(f[0], name+"{")) {
			v, _ := strconv.ParseFloat(f[1], 64)
			return v
		}
	}
	return -1
}

func (b *binary) waitReady(t *testing.T) {
	t.Helper()
	testenv.Eventually(t, 60*time.Second, "capture binary ready", func() error {
		if err := b.ExitErr(); err != nil {
			t.Fatal(err)
		}
		if err := b.ready(); err != nil {
			return err
		}
		if v := b.metric("tidemark_capture_active"); v != 1 {
			return errorf("tidemark_capture_active %v, want 1", v)
		}
		return nil
	})
}

// kill is a real kill -9: no shutdown code runs.
func (b *binary) kill() { b.Kill() }

// A real `kill -9` of the capture process, twice, during a workload; a
// standby instance on the same slot waits, then takes over within 10 s of
// the active one dying; nothing committed is missing.
func TestKill9AndTakeover(t *testing.T) {
	t.Parallel()
	pg := testenv.SharedPostgres(t)
	dsn, k, cfg := newRig(t, pg)
	exec(t, connect(t, dsn), "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", cfg.Slot)
	w := startWorkload(t, dsn, 50)

	a := startBinary(t, cfg)
	a.waitReady(t)
	time.Sleep(700 * time.Millisecond)
	a.kill()

	a = startBinary(t, cfg)
	a.waitReady(t)
	// The standby: same slot, in-process.
	r := start(t, cfg)
	time.Sleep(2 * time.Second)
	if r.c.Active() {
		t.Fatal("standby streams while the active instance holds the slot")
	}
	a.kill()
	died := time.Now()
	testenv.Eventually(t, 10*time.Second, "standby takes over", func() error {
		if !r.c.Active() {
			return errorf("standby not streaming")
		}
		return nil
	})
	t.Logf("standby took over %s after kill -9", time.Since(died).Round(time.Millisecond))
	time.Sleep(500 * time.Millisecond)
	w.finish()
	waitAll(t, k, cfg.Relay.Topic, w.all())
}

// SIGTERM: the binary stops reading, flushes, confirms its final LSN and
// exits 0.
func TestSigtermConfirmsAndExits0(t *testing.T) {
	t.Parallel()
	pg := testenv.SharedPostgres(t)
	dsn, k, cfg := newRig(t, pg)
	conn := connect(t, dsn)
	b := startBinary(t, cfg)
	b.waitReady(t)
	exec(t, conn, "INSERT INTO catalog.items (tenant_id, item_id, version) SELECT 't', 'i' || g, 1 FROM generate_series(1, 2000) g")
	// The transaction's commit record starts at its events' LSN and ends past
	// it (pg_current_wal_lsn would also count other tests' WAL on the shared
	// server, which this slot may never be sent).
	var commit schema.LSN
	for _, r := range waitItem(t, k, cfg.Relay.Topic, "t", "i2000", 1) {
		if c, ok := r.ev.(*schema.Change); ok && c.Item == "i2000" {
			commit = c.LSN
		}
	}
	// The metric names are part of the contract.
	text := b.metrics(t)
	for _, name := range []string{
		"tidemark_capture_transactions_total", "tidemark_relay_records_produced_total",
		"tidemark_relay_produce_errors_total", "tidemark_relay_inflight_records", "tidemark_capture_confirmed_lsn_bytes",
		"tidemark_capture_commit_to_produced_seconds_bucket", "tidemark_slot_lag_bytes",
		"tidemark_capture_resets_total", "tidemark_capture_heartbeats_total",
	} {
		if !strings.Contains(text, name) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	// Every series also carries the process's const labels (cache_namespace,
	// topic), in sorted order among the series' own.
	for _, want := range []struct{ name, label, value string }{
		{"tidemark_capture_events_total", `op="upsert"`, "2000"},
		{"tidemark_slot_wal_status", `status="reserved"`, "1"},
	} {
		found := false
		for _, line := range strings.Split(text, "\n") {
			f := strings.Fields(line)
			if len(f) == 2 && strings.HasPrefix(f[0], want.name+"{") && strings.Contains(f[0], want.label) && f[1] == want.value {
				found = true
			}
		}
		if !found {
			t.Errorf("/metrics lacks %s{%s} %s", want.name, want.label, want.value)
		}
	}
	// The counter moves on the producer's acknowledgement, which can reach
	// capture after the test's own consumer has read the record.
	testenv.Eventually(t, 15*time.Second, "every record counted produced", func() error {
		if v := b.metric("tidemark_relay_records_produced_total"); v < 2000 {
			return errorf("tidemark_relay_records_produced_total = %v, want >= 2000", v)
		}
		return nil
	})
	done := b.Done()
	if err := b.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("no exit within 30s of SIGTERM")
	}
	if code := b.ExitCode(); code != 0 {
		t.Fatalf("exit code %d, want 0", code)
	}
	if got := slotLSN(t, conn, cfg.Slot); got <= commit {
		t.Fatalf("confirmed_flush_lsn %s after SIGTERM, want past %s (the last transaction's commit record)", got, commit)
	}
}

// Shutdown while Kafka refuses records: the flush is bounded by
// ShutdownTimeout, Run reports the records it could not deliver (exit
// non-zero, not a clean stop), and nothing past Kafka's data is confirmed.
func TestShutdownWithKafkaDownIsNotClean(t *testing.T) {
	t.Parallel()
	pg := testenv.SharedPostgres(t)
	dsn := pg.MigratedDatabase(t)
	k := testenv.StartKfake(t) // injects produce faults
	cfg := testConfig(t, dsn, k)
	cfg.ShutdownTimeout = 2 * time.Second
	conn := connect(t, dsn)
	r := start(t, cfg)
	r.waitReady(t)
	fault := k.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.NotLeaderForPartition, Count: -1})
	exec(t, conn, "INSERT INTO catalog.items (tenant_id, item_id, version) VALUES ('t', 'stuck', 1)")
	testenv.Eventually(t, 30*time.Second, "capture tries to produce the record", func() error {
		if fault.Hits() == 0 {
			return errorf("no produce attempt yet")
		}
		return nil
	})
	err := r.wait(t)
	if err == nil || !strings.Contains(err.Error(), "did not ack") {
		t.Fatalf("Run = %v, want an error saying Kafka did not ack", err)
	}
	// Nothing unacked was confirmed: a new capture on the same slot, with
	// Kafka healthy, delivers the transaction again.
	fault.Remove()
	r2 := start(t, cfg)
	r2.waitReady(t)
	waitItem(t, k, cfg.Relay.Topic, "t", "stuck", 1)
}
