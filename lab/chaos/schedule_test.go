package chaos

import (
	"slices"
	"testing"
	"time"
)

func TestScheduleHasEveryKindInsideTheRun(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Cluster = true
	// serve-redis-cut, serve-cut-redis-rewind and serve-second-redis need
	// standalone servers.
	if kinds := cfg.Kinds(); len(kinds) != len(AllFaults)-4 || slices.Contains(kinds, FaultPromotion) || slices.Contains(kinds, FaultServeRedisCut) ||
		slices.Contains(kinds, FaultServeCutRedisRewind) || slices.Contains(kinds, FaultServeSecondRedis) {
		t.Fatalf("kinds of a %s run with --cluster and the embedded broker = %v (all but the promotion, serve-redis-cut, serve-cut-redis-rewind and serve-second-redis)", cfg.Duration, kinds)
	}
	cfg.Duration = PromotionMinRun
	kinds := cfg.Kinds()
	if len(kinds) != len(AllFaults)-3 {
		t.Fatalf("kinds of a %s run with --cluster and the embedded broker = %v", cfg.Duration, kinds)
	}
	d := 90 * time.Second
	s := schedule(kinds, d, 20*time.Second, 7)
	warm, tail := warmupAndTail(d)
	for _, k := range kinds {
		if !slices.ContainsFunc(s, func(f plannedFault) bool { return f.Kind == k }) {
			t.Errorf("kind %s not scheduled", k)
		}
	}
	for _, f := range s {
		if f.At < warm || f.At > d-tail {
			t.Errorf("%s at %s outside [%s, %s]", f.Kind, f.At, warm, d-tail)
		}
	}
	if !slices.Equal(s, schedule(kinds, d, 20*time.Second, 7)) {
		t.Error("the same seed gave another schedule")
	}
	if long := schedule(kinds, time.Hour, 20*time.Second, 7); len(long) < 150 {
		t.Errorf("an hour at one fault per 20 s has only %d faults", len(long))
	}
	cfg.Cluster, cfg.Kafka = false, []string{"k:9092"}
	if k := cfg.Kinds(); !slices.Contains(k, FaultServeSecondRedis) || !slices.Contains(k, FaultServeRedisCut) || !slices.Contains(k, FaultServeCutRedisRewind) {
		t.Errorf("kinds without the cluster = %v, want serve-redis-cut, serve-cut-redis-rewind and serve-second-redis among them", k)
	}
	for _, k := range cfg.Kinds() {
		if k == FaultBrokerRestart || k == FaultReshard || k == FaultKillMaster {
			t.Errorf("%s applies without the embedded broker and the cluster", k)
		}
	}
}
