package broker

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"tidemark/internal/testenv"
)

// TestPersistsAcrossRestart proves what `tidemark kafka --data-dir` promises:
// records survive a restart on the same fixed port.
func TestPersistsAcrossRestart(t *testing.T) {
	cfg := Config{DataDir: t.TempDir(), Port: testenv.FreePort(t), Brokers: 1, Partitions: 3}
	ctx := testenv.Context(t, time.Minute)

	b, err := New(cfg, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.AllowAutoTopicCreation(), kgo.DefaultProduceTopic("persist"))
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, kgo.KeyStringRecord("k", "v1")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	addr := b.Addrs()[0]
	b.Close()

	b2, err := New(cfg, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	if got := b2.Addrs()[0]; got != addr {
		t.Fatalf("restarted on %s, want the fixed %s", got, addr)
	}
	cons, err := kgo.NewClient(kgo.SeedBrokers(b2.Addrs()...), kgo.ConsumeTopics("persist"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	for {
		fs := cons.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatal("record written before the restart is gone")
		}
		var got string
		fs.EachRecord(func(r *kgo.Record) { got = string(r.Value) })
		if got == "v1" {
			return
		}
	}
}

func TestValidateNamesEveryProblem(t *testing.T) {
	err := Config{Port: -1, Brokers: 0, Partitions: 0}.Validate()
	for _, want := range []string{"--port", "--brokers", "--partitions"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, does not name %s", err, want)
		}
	}
}
