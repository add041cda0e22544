package relay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/tidemark/tidemark/promise"
)

// ErrTopicConfig marks a data topic whose configuration breaks one of the
// pipeline's guarantees; the message says how to fix it. Retrying does not
// help.
var ErrTopicConfig = errors.New("relay: topic configuration")

// TopicRequirements are what the data topic must provide.
type TopicRequirements struct {
	// ReplicationFactor every partition needs, so that a broker loss loses
	// no acknowledged change. A cluster with fewer brokers is held to its
	// broker count (a one-broker development cluster passes, with a warning).
	ReplicationFactor int
	// MinInsync is the min.insync.replicas the topic needs (capped at its
	// replication factor): with acks=all, an acknowledged change is then on
	// at least this many brokers.
	MinInsync int
	// Retention is the shortest retention.ms a topic that deletes old
	// segments may have: the cache's hard lifetime plus the longest outage
	// after which a rewind or replay must still find its records. It is
	// also the shortest min.compaction.lag.ms a compacted topic may have,
	// so that no applier lagging less than that misses a reset marker.
	Retention time.Duration
}

// MinRetention is the shortest TopicRequirements.Retention accepted. An
// applier that misses a reset marker (compacted away under a later marker
// of its partition) or an invalidation (deleted unread) harms only entries
// still alive when it passes them: observed within the hard lifetime (and
// the reset margin) before. Compaction lag and retention above that, with
// room, keep every record such an entry depends on.
const MinRetention = time.Minute

// DefaultTopicRequirements are production's: three replicas, two in sync,
// and a day of outage beyond the hard lifetime.
func DefaultTopicRequirements() TopicRequirements {
	return TopicRequirements{ReplicationFactor: 3, MinInsync: 2, Retention: 24*time.Hour + promise.HardLifetime}
}

func (r TopicRequirements) validate() error {
	if r.ReplicationFactor < 1 || r.MinInsync < 1 || r.Retention < 0 {
		return fmt.Errorf("topic requirements: replication factor %d and min.insync.replicas %d must be at least 1, retention %s not negative",
			r.ReplicationFactor, r.MinInsync, r.Retention)
	}
	return nil
}

// CheckTopic reads the data topic's real configuration from the cluster and
// returns every way it falls short of req, each with the command that fixes
// it (ErrTopicConfig). It logs a warning when the cluster itself is too
// small for production's replication.
func (p *Producer) CheckTopic(ctx context.Context, req TopicRequirements) error {
	if err := req.validate(); err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	topic := p.cfg.Topic
	adm := kadm.NewClient(p.client)
	brokers, err := adm.ListBrokers(ctx)
	if err != nil {
		return fmt.Errorf("relay: list brokers: %w", err)
	}
	td, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return fmt.Errorf("relay: describe topic %s: %w", topic, err)
	}
	t, ok := td[topic]
	if !ok || t.Err != nil || len(t.Partitions) == 0 {
		return fmt.Errorf("relay: describe topic %s: not found (%v)", topic, t.Err)
	}
	rf := len(t.Partitions[0].Replicas)
	for _, pd := range t.Partitions {
		rf = min(rf, len(pd.Replicas))
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return fmt.Errorf("relay: describe configs of %s: %w", topic, err)
	}
	rc, err := rcs.On(topic, nil)
	if err == nil {
		err = rc.Err
	}
	if err != nil {
		return fmt.Errorf("relay: describe configs of %s: %w", topic, err)
	}
	conf := map[string]string{}
	for _, c := range rc.Configs {
		if c.Value != nil {
			conf[c.Key] = *c.Value
		}
	}

	var problems []string
	alter := func(kv string) string {
		return fmt.Sprintf("kafka-configs.sh --bootstrap-server BROKER --alter --entity-type topics --entity-name %s --add-config %s", topic, kv)
	}
	wantRF := min(req.ReplicationFactor, len(brokers))
	if rf < wantRF {
		problems = append(problems, fmt.Sprintf(
			"replication factor is %d but %d is needed (losing one broker would lose acknowledged changes): add replicas with kafka-reassign-partitions.sh, or recreate the topic with --replication-factor %d",
			rf, wantRF, wantRF))
	} else if rf < req.ReplicationFactor {
		p.log.Warn("the data topic has fewer replicas than production needs; fine for development only",
			"topic", topic, "replication_factor", rf, "brokers", len(brokers), "production", req.ReplicationFactor)
	}
	if v, ok := conf["min.insync.replicas"]; ok {
		n, err := strconv.Atoi(v)
		want := min(req.MinInsync, rf)
		if err != nil || n < want {
			problems = append(problems, fmt.Sprintf(
				"min.insync.replicas is %s but %d is needed (acks=all must mean the change is on %d brokers): %s",
				v, want, want, alter("min.insync.replicas="+strconv.Itoa(want))))
		}
	}
	if v := conf["unclean.leader.election.enable"]; strings.EqualFold(v, "true") {
		problems = append(problems, fmt.Sprintf(
			"unclean.leader.election.enable is true: an out-of-sync replica may become leader and drop acknowledged changes: %s",
			alter("unclean.leader.election.enable=false")))
	}
	policy := strings.Split(strings.ReplaceAll(conf["cleanup.policy"], " ", ""), ",")
	if v, ok := conf["cleanup.policy"]; ok && !slices.Contains(policy, "compact") {
		problems = append(problems, fmt.Sprintf(
			"cleanup.policy is %q but must include compact (the topic is the replay source: it keeps every key's newest version): %s",
			v, alter("cleanup.policy=[compact,delete]")))
	}
	if v, ok := conf["min.compaction.lag.ms"]; ok && slices.Contains(policy, "compact") {
		// Markers share one key per partition: compaction may drop a reset
		// or a TRUNCATE once a later marker of the partition exists, while
		// an applier behind both has not read it. Kept as long as a rewind
		// or replay must find records, no applier within that bound misses
		// one.
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || time.Duration(ms)*time.Millisecond < req.Retention {
			problems = append(problems, fmt.Sprintf(
				"min.compaction.lag.ms is %s but must be at least %d (%s: compaction may otherwise remove a reset or TRUNCATE marker before a lagging applier reads it): %s",
				v, req.Retention.Milliseconds(), req.Retention, alter("min.compaction.lag.ms="+strconv.FormatInt(req.Retention.Milliseconds(), 10))))
		}
	}
	if v, ok := conf["retention.ms"]; ok && slices.Contains(policy, "delete") {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || (ms >= 0 && time.Duration(ms)*time.Millisecond < req.Retention) {
			problems = append(problems, fmt.Sprintf(
				"retention.ms is %s but must be at least %d (%s: the cache's hard lifetime plus the longest outage a rewind or replay must survive): %s",
				v, req.Retention.Milliseconds(), req.Retention, alter("retention.ms="+strconv.FormatInt(req.Retention.Milliseconds(), 10))))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: topic %s: %s", ErrTopicConfig, topic, strings.Join(problems, "; "))
	}
	return nil
}
