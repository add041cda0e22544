package helm

import (
	"fmt"
	"testing"
	"time"

	"github.com/tidemark/tidemark/promise"

	"sigs.k8s.io/yaml"
)

// The freshness alerts fire at the levels `tidemark status` judges by
// default (promise.WatermarkWarn and the promise), so a deploy gate and an
// alert never disagree about the same watermark; the warning is above any
// age a healthy idle pipeline reaches (promise.MaxHeartbeat and its margin).
func TestAlertLevelsAreStatusLevels(t *testing.T) {
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `json:"alert"`
				Expr  string `json:"expr"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal([]byte(mustRead(t, "../../compose/prometheus/alerts.yml")), &rules); err != nil {
		t.Fatal(err)
	}
	want := map[string]time.Duration{"TidemarkFreshnessAtRisk": promise.WatermarkWarn, "TidemarkFreshnessSLOBreached": promise.Bound}
	const expr = "max by (cache_namespace, topic) (tidemark_watermark_age_seconds) > %g"
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if level, ok := want[r.Alert]; ok {
				if w := fmt.Sprintf(expr, level.Seconds()); r.Expr != w {
					t.Errorf("%s: expr %q, want %q", r.Alert, r.Expr, w)
				}
				delete(want, r.Alert)
			}
		}
	}
	if len(want) > 0 {
		t.Errorf("alerts.yml lacks %v", want)
	}
	if idle := promise.MaxHeartbeat + promise.HeartbeatMargin; idle >= promise.WatermarkWarn {
		t.Errorf("an idle pipeline's watermark reaches %s, not under the warning %s", idle, promise.WatermarkWarn)
	}
}
