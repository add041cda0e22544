package capture_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/relay"
)

// An existing data topic whose configuration breaks the pipeline's
// guarantees stops capture before streaming, with the fix in the error.
func TestPreflightTopicConfig(t *testing.T) {
	t.Parallel()
	pg := testenv.SharedPostgres(t)
	dsn := pg.MigratedDatabase(t)
	k := testenv.StartKafka(t)
	cfg := testConfig(t, dsn, k)
	cfg.Relay.Topic = testenv.Unique(t, "topic")
	policy := "delete"
	k.CreateTopic(t, cfg.Relay.Topic, testPartitions, map[string]*string{"cleanup.policy": &policy})
	err := runErr(t, cfg)
	if !errors.Is(err, relay.ErrTopicConfig) {
		t.Fatalf("Run = %v, want a topic configuration error", err)
	}
	for _, want := range []string{`cleanup.policy is "delete"`, "--add-config cleanup.policy=[compact,delete]", cfg.Relay.Topic} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// A data topic that allows unclean leader election can lose acknowledged
// invalidations silently: capture refuses it, with the fix in the error.
func TestPreflightRefusesUncleanLeaderElection(t *testing.T) {
	t.Parallel()
	pg := testenv.SharedPostgres(t)
	dsn := pg.MigratedDatabase(t)
	k := testenv.StartKafka(t)
	cfg := testConfig(t, dsn, k)
	cfg.Relay.Topic = testenv.Unique(t, "topic")
	policy, unclean := "compact,delete", "true"
	k.CreateTopic(t, cfg.Relay.Topic, testPartitions, map[string]*string{"cleanup.policy": &policy, "unclean.leader.election.enable": &unclean})
	err := runErr(t, cfg)
	if !errors.Is(err, relay.ErrTopicConfig) {
		t.Fatalf("Run = %v, want a topic configuration error for unclean.leader.election.enable=true", err)
	}
	if want := "--add-config unclean.leader.election.enable=false"; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not say %q", err, want)
	}
}
