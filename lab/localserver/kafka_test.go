//go:build realkafka

package localserver

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A three-node cluster starts, takes acks=all writes, survives a node killed
// and restarted on its data, and knows its active controller.
func TestKafkaClusterKillRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	start := time.Now()
	k, err := NewKafka(ctx, KafkaConfig{Dir: t.TempDir(), Nodes: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Remove()
	t.Logf("3 nodes up in %s", time.Since(start).Round(time.Millisecond))
	cl, err := k.Client(kgo.DefaultProduceTopic("t"), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 3, 3, nil, "t"); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, kgo.StringRecord("a")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	ctrl, err := k.ActiveController(ctx)
	if err != nil || k.Node(ctrl) == nil {
		t.Fatalf("active controller %d: %v", ctrl, err)
	}
	victim := k.Node(2)
	victim.Kill()
	wctx, wcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer wcancel()
	if err := k.WaitBrokers(wctx); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, kgo.StringRecord("b")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	if err := k.WaitBrokers(wctx); err != nil {
		t.Fatal(err)
	}
}
