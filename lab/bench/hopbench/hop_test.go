package hopbench

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/tidemark/internal/config"
)

// Validate names every broken field.
func TestValidateNamesFields(t *testing.T) {
	good := DefaultConfig()
	good.Brokers = []string{"127.0.0.1:9092"}
	if err := good.Validate(); err != nil {
		t.Fatalf("defaults with a broker: %v", err)
	}
	bad := Config{Lingers: []time.Duration{-time.Millisecond}, Warmup: -time.Second}
	var got []string
	for _, fe := range config.Fields(bad.Validate()) {
		got = append(got, fe.Field)
	}
	slices.Sort(got)
	want := []string{"Brokers", "Duration", "FetchWait", "Lingers", "Partitions", "Rate", "Warmup"}
	if !slices.Equal(slices.Compact(got), want) {
		t.Errorf("fields reported %v, want %v", got, want)
	}
}

// A short run on an in-memory broker sends the rate's records in every
// arm, reads every one back, and reports each arm's latencies.
func TestRunReadsEveryRecordBack(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cfg := DefaultConfig()
	cfg.Brokers, cfg.Rate, cfg.Warmup, cfg.Duration, cfg.Partitions = c.ListenAddrs(), 400, 500*time.Millisecond, time.Second, 3
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := Run(ctx, cfg, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Arms) != len(cfg.Lingers) {
		t.Fatalf("%d arms, want %d", len(res.Arms), len(cfg.Lingers))
	}
	for _, a := range res.Arms {
		if a.Sent != 400 || a.Ack.N != 400 || a.Read.N != 400 {
			t.Errorf("linger %s: sent %d, acknowledged %d, read back %d, want 400 each", a.Linger, a.Sent, a.Ack.N, a.Read.N)
		}
		if a.Read.P50 <= 0 || a.Read.P50 > time.Second || a.Ack.P50 <= 0 {
			t.Errorf("linger %s: ack p50 %s, read p50 %s", a.Linger, a.Ack.P50, a.Read.P50)
		}
	}
	// The arms' topics are deleted: the bench leaves nothing on the cluster.
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	topics, err := kadm.NewClient(cl).ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if names := topics.Names(); len(names) != 0 {
		t.Errorf("topics left on the cluster: %v", names)
	}
	var b strings.Builder
	if err := res.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "| 1ms | 400 |") || !strings.Contains(b.String(), "| 0s | 400 |") {
		t.Errorf("report lacks a row per arm:\n%s", b.String())
	}
}
