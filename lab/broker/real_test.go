//go:build realkafka

package broker

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/tidemark/lab/localserver"
	"github.com/tidemark/tidemark/lab/testenv"
)

// `tidemark-lab kafka --real` serves Apache Kafka on the fixed ports it was
// given, auto-creating topics with the configured partitions.
func TestRealServesOnFixedPort(t *testing.T) {
	port := testenv.FreePort(t)
	dir := t.TempDir()
	describe := filepath.Join(dir, "cluster.json")
	b, err := New(Config{Port: port, Brokers: 1, Partitions: 3, Real: true,
		SASLDir: filepath.Join(dir, "certs"), Describe: describe}, Deps{Log: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	stop := sync.OnceValue(func() error { cancel(); return <-done })
	defer stop()
	if got := b.Addrs(); len(got) != 1 || got[0] != "127.0.0.1:"+strconv.Itoa(port) {
		t.Fatalf("Addrs = %v, want 127.0.0.1:%d", got, port)
	}
	// The description another process attaches to (make test-kafka).
	info, err := localserver.ReadKafkaInfo(describe)
	if err != nil {
		t.Fatal(err)
	}
	if got := localserver.AttachKafka(info); !slices.Equal(got.Brokers(), b.Addrs()) || len(got.SASLBrokers()) != 1 || info.Certs == nil || info.Certs.CA == "" {
		t.Fatalf("described as %+v (certificates %+v), want the brokers %v with a SASL_SSL listener and its CA", info.Nodes, info.Certs, b.Addrs())
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.AllowAutoTopicCreation(), kgo.DefaultProduceTopic("auto"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	pctx := testenv.Context(t, time.Minute)
	r := kgo.StringRecord("v")
	if err := cl.ProduceSync(pctx, r).FirstErr(); err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(cl)
	td, err := adm.ListTopics(pctx, "auto")
	if err != nil || len(td["auto"].Partitions) != 3 {
		t.Fatalf("auto-created topic: %+v, %v; want 3 partitions", td["auto"], err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(describe); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the cluster's description outlived it (%v): a test binary could attach to a cluster that is gone", err)
	}
}
