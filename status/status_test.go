package status

import (
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/promise"
)

// The verdict is the contract deploy gates read: OK up to --warn, AT RISK up
// to --slo, BREACHED beyond it or when no watermark bounds pending events.
func TestVerdict(t *testing.T) {
	cfg := DefaultConfig() // warn 5s, slo 30s
	now := time.Now()
	for _, tc := range []struct {
		age   time.Duration
		known bool
		want  string
	}{
		{time.Second, true, OK},
		{5 * time.Second, true, OK},
		{6 * time.Second, true, AtRisk},
		{30 * time.Second, true, AtRisk},
		{31 * time.Second, true, Breached},
		{time.Second, false, Breached},
	} {
		var rep Report
		rep.verdict(cfg, cache.Watermark{W: now.Add(-tc.age), Known: tc.known}, now)
		if rep.Verdict != tc.want {
			t.Errorf("age %s known %v: verdict %s (%s), want %s", tc.age, tc.known, rep.Verdict, rep.Reason, tc.want)
		}
	}
}

func TestValidateNamesEveryFlag(t *testing.T) {
	err := Config{SLO: time.Second, Warn: 2 * time.Second}.Validate()
	for _, flag := range []string{"Brokers:", "Redis:", "Topic:", "Warn:", "Timeout:"} {
		if err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("Validate() = %v, does not name %s", err, flag)
		}
	}
}

// The warning level is one a healthy idle pipeline cannot reach: the
// longest heartbeat capture accepts plus its margin is refused, a level
// above it is not, and the default is the promise's (the alert's too:
// TestAlertLevelsAreStatusLevels in ./deploy/helm).
func TestValidateRefusesAWarningAHealthyPipelineReaches(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Brokers, cfg.Redis = []string{"127.0.0.1:9092"}, "redis://127.0.0.1:6379/0"
	if cfg.Warn != promise.WatermarkWarn {
		t.Errorf("default Warn %s, want promise.WatermarkWarn %s", cfg.Warn, promise.WatermarkWarn)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	idle := promise.MaxHeartbeat + promise.HeartbeatMargin
	for _, c := range []struct {
		warn time.Duration
		ok   bool
	}{{idle, true}, {idle - time.Millisecond, false}, {2 * time.Second, false}} {
		cfg.Warn = c.warn
		if err := cfg.Validate(); (err == nil) != c.ok || (err != nil && !strings.Contains(err.Error(), "Warn:")) {
			t.Errorf("warn %s: %v, want accepted %v", c.warn, err, c.ok)
		}
	}
}
