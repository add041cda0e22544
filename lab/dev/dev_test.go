package dev

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/tidemark/capture"
	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/schema"
)

// runDev runs `tidemark-lab dev` in-process until check returns, then stops it
// and returns what it printed.
func runDev(t *testing.T, cfg Config, check func(Endpoints)) string {
	t.Helper()
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	d, err := New(cfg, Deps{Log: testenv.Logger(t), Out: &out, Ready: func(ep Endpoints) {
		check(ep)
		cancel()
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Run(ctx); err != nil {
		t.Fatalf("dev run: %v\n%s", err, out.String())
	}
	return out.String()
}

// TestRestartReusesDataDir: a second `tidemark-lab dev` on the same data dir
// reuses the database, slot and topic, prints no new keys, and sends no
// reset marker (a clean restart is not a gap).
func TestRestartReusesDataDir(t *testing.T) {
	t.Parallel()
	dir, err := os.MkdirTemp("", "tidemark-dev-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil { // the private Postgres runs as another user
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	k := testenv.StartKafka(t)

	cfg := DefaultConfig()
	cfg.DataDir = dir
	cfg.Kafka = k.Brokers
	cfg.MetricsAddr = "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	cfg.Pipeline.APIAddr = "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	cfg.Pipeline.Partitions = 3

	first := runDev(t, cfg, func(ep Endpoints) {
		confirmedLSN(t, ep.PG, cfg.Pipeline.Slot)
	})
	if !strings.Contains(first, "demo API keys") {
		t.Fatalf("first run printed no API keys:\n%s", first)
	}
	second := runDev(t, cfg, func(ep Endpoints) {
		// The slot survived the restart. (Its confirmed_flush_lsn may step
		// back a little: Postgres 15 does not persist it at shutdown, so the
		// last transactions are re-sent; the pipeline is at-least-once.)
		confirmedLSN(t, ep.PG, cfg.Pipeline.Slot)
		// Capture streams again: a resolved marker arrives after the restart,
		// and no reset marker is anywhere on the topic.
		restarted := time.Now()
		cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.ConsumeTopics(cfg.Pipeline.Topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		var resolvedAfter bool
		for !resolvedAfter && ctx.Err() == nil {
			cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
				ev, err := schema.Decode(r.Value)
				if err != nil {
					t.Errorf("undecodable record on the topic: %v", err)
					return
				}
				switch ev := ev.(type) {
				case *schema.Reset:
					if ev.Reason != capture.ReasonColdStart { // the first run's
						t.Errorf("reset marker on a clean restart: %+v", ev)
					}
				case *schema.Resolved:
					if ev.ResolvedTime.After(restarted.Add(-time.Second)) {
						resolvedAfter = true
					}
				}
			})
		}
		if !resolvedAfter {
			t.Error("no resolved marker after the restart: capture is not streaming")
		}
	})
	if strings.Contains(second, "demo API keys") {
		t.Errorf("second run made new API keys instead of reusing them:\n%s", second)
	}
}

func confirmedLSN(t *testing.T, dsn, slot string) string {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var lsn string
	if err := conn.QueryRow(context.Background(), `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&lsn); err != nil {
		t.Fatalf("slot %s: %v", slot, err)
	}
	return lsn
}
