package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/tidemark/internal/kafkaconn"
)

// State is what capture remembers about the Postgres it read last, so that a
// replaced server (new system identifier) or a promoted standby (new
// timeline) is detected as a gap. It lives in a small compacted topic next
// to the data topic ("<topic>.capture", key = slot name), not in Postgres:
// a replaced Postgres cannot be trusted to remember its predecessor, and the
// data topic's readers must never see a record that is not an event.
type State struct {
	SystemID     string `json:"system_identifier"`
	Timeline     int32  `json:"timeline"`
	Database     string `json:"database"`
	PendingReset string `json:"pending_reset,omitempty"` // reasons whose reset marker may not be in Kafka yet
	// Publication is the fingerprint of what the publication streams of
	// the table, as the run that saved the state streamed it (capture);
	// another one at start means changes may not have been streamed.
	Publication string `json:"publication,omitempty"`
	// Table is the fingerprint of the table's definition (its rewrites,
	// columns, their enum labels, its partitions) as that run found it;
	// another one at start means values may have changed unstreamed.
	Table string `json:"table,omitempty"`
}

// StateTopic is the name of the capture state topic for a data topic.
func StateTopic(topic string) string { return topic + ".capture" }

// LoadState reads the newest state stored under key (found=false if none).
func (p *Producer) LoadState(ctx context.Context, key string) (st State, found bool, err error) {
	topic := StateTopic(p.cfg.Topic)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	adm := kadm.NewClient(p.client)
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return st, false, fmt.Errorf("relay: read %s: %w", topic, err)
	}
	end, ok := ends.Lookup(topic, 0)
	if !ok || errors.Is(end.Err, kerr.UnknownTopicOrPartition) || end.Offset <= 0 {
		return st, false, nil
	}
	if end.Err != nil {
		return st, false, fmt.Errorf("relay: read %s: %w", topic, end.Err)
	}
	// Records deleted or expired (a retention an operator gave the topic)
	// leave nothing to read up to the end: no state, not a wait for one.
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return st, false, fmt.Errorf("relay: read %s: %w", topic, err)
	}
	if first, ok := starts.Lookup(topic, 0); ok && first.Err == nil && first.Offset >= end.Offset {
		return st, false, nil
	}
	opts, err := kafkaconn.Opts(p.cfg.Brokers, p.cfg.Kafka, p.log)
	if err != nil {
		return st, false, fmt.Errorf("relay: read %s: %w", topic, err)
	}
	cl, err := kgo.NewClient(append(opts,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))...)
	if err != nil {
		return st, false, fmt.Errorf("relay: read %s: %w", topic, err)
	}
	defer cl.Close()
	for {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return st, false, fmt.Errorf("relay: read %s up to offset %d: %w", topic, end.Offset, err)
		}
		for _, fe := range fs.Errors() {
			return st, false, fmt.Errorf("relay: read %s: %w", topic, fe.Err)
		}
		done := false
		fs.EachRecord(func(r *kgo.Record) {
			if string(r.Key) == key {
				var s State
				if json.Unmarshal(r.Value, &s) == nil {
					st, found = s, true
				}
			}
			if r.Offset >= end.Offset-1 {
				done = true
			}
		})
		if done {
			return st, found, nil
		}
	}
}

// SaveState stores st under key and waits for Kafka to ack it.
func (p *Producer) SaveState(ctx context.Context, key string, st State) error {
	topic := StateTopic(p.cfg.Topic)
	if err := p.ensureStateTopic(ctx, topic); err != nil {
		return err
	}
	b, _ := json.Marshal(st)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := p.client.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte(key), Value: b}).FirstErr(); err != nil {
		return fmt.Errorf("relay: save capture state to %s: %w", topic, err)
	}
	return nil
}

// ensureStateTopic creates the state topic only when listing does not show
// it, so a principal without CREATE on the cluster (the topic made by an
// operator beforehand) can save state.
func (p *Producer) ensureStateTopic(ctx context.Context, topic string) error {
	adm := kadm.NewClient(p.client)
	td, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return fmt.Errorf("relay: describe %s: %w", topic, err)
	}
	if t, ok := td[topic]; ok && t.Err == nil {
		return nil
	} else if ok && !errors.Is(t.Err, kerr.UnknownTopicOrPartition) {
		return fmt.Errorf("relay: describe %s: %w", topic, t.Err)
	}
	policy := "compact"
	resp, err := adm.CreateTopic(ctx, 1, -1, map[string]*string{"cleanup.policy": &policy}, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("relay: create %s: %w", topic, err)
	}
	return nil
}
