package relay

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tidemark/tidemark/internal/kafkaconn"
	"github.com/tidemark/tidemark/lab/testenv"
)

// A principal without CREATE can save capture state when the state topic
// exists: the topic is listed before any create is tried.
func TestSaveStateWithoutCreate(t *testing.T) {
	const topic = "tm"
	allow := func(res kmsg.ACLResourceType, name string, op kmsg.ACLOperation) kfake.ACL {
		return kfake.ACL{Resource: res, Name: name, Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: op, Allow: true}
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(), kfake.EnableACLs(),
		kfake.Superuser("SCRAM-SHA-512", "admin", "admin-pw"),
		kfake.User("SCRAM-SHA-512", "capture", "capture-pw",
			allow(kmsg.ACLResourceTypeTopic, StateTopic(topic), kmsg.ACLOperationDescribe),
			allow(kmsg.ACLResourceTypeTopic, StateTopic(topic), kmsg.ACLOperationRead),
			allow(kmsg.ACLResourceTypeTopic, StateTopic(topic), kmsg.ACLOperationWrite)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admOpts, err := kafkaconn.Opts(c.ListenAddrs(), kafkaconn.Config{SASLMechanism: "SCRAM-SHA-512", SASLUser: "admin", SASLPassword: "admin-pw"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	admCl, err := kgo.NewClient(admOpts...)
	if err != nil {
		t.Fatal(err)
	}
	defer admCl.Close()
	if _, err := kadm.NewClient(admCl).CreateTopic(ctx, 1, 1, nil, StateTopic(topic)); err != nil {
		t.Fatal(err)
	}

	cfg := DefaultConfig()
	cfg.Brokers, cfg.Topic = c.ListenAddrs(), topic
	cfg.Kafka = kafkaconn.Config{SASLMechanism: "SCRAM-SHA-512", SASLUser: "capture", SASLPassword: "capture-pw"}
	p, err := New(cfg, Deps{Log: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	want := State{SystemID: "42", Timeline: 3, Database: "catalog"}
	if err := p.SaveState(ctx, "slot", want); err != nil {
		t.Fatalf("save state as a principal without CREATE, state topic present: %v", err)
	}
	got, found, err := p.LoadState(ctx, "slot")
	if err != nil || !found || got != want {
		t.Fatalf("load state: got %+v found=%v err=%v, want %+v", got, found, err, want)
	}
}
