package status

import (
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/cache"
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
