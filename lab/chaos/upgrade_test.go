package chaos

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/rollout"
)

// upgradeFromCommit is the old build of the rolling-upgrade test: a commit
// on main whose CLI takes the flags the harness gives the stages, named in
// testdata/upgrade-from.commit until a release exists.
func upgradeFromCommit(t *testing.T) string {
	b, err := os.ReadFile("testdata/upgrade-from.commit")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestChaosRollingUpgrade starts every stage on the old build and replaces
// them one process at a time with the current one, under load and faults;
// the checker's verdict and the budget cover the whole run.
func TestChaosRollingUpgrade(t *testing.T) {
	// The chaos runs go two at a time (go test's -parallel is the number
	// of cores): each is a few processes under a rate-limited load, judged
	// by visibility times and the source budget, neither of which a busier
	// box can turn into a violation.
	t.Parallel()
	cfg := testConfig(t, testenv.Binary(t))
	cfg.UpgradeFrom = testenv.BinaryAtCommit(t, upgradeFromCommit(t))
	cfg.Duration, cfg.Seed = 100*time.Second, 28
	cfg.Faults = []string{FaultKillServe, FaultKillApply, FaultStopCapture, FaultRedisRestart, FaultBrokerRestart}
	if len(cfg.Kafka) > 0 {
		cfg.Faults = slices.DeleteFunc(cfg.Faults, func(f string) bool { return f == FaultBrokerRestart })
	}
	rep := run(t, cfg)
	u := rep.Upgrade
	if u == nil || !u.Done() {
		t.Fatalf("the rolling upgrade was not carried out: %+v", u)
	}
	if u.Replaced != 6 {
		t.Errorf("%d processes replaced, want every stage process (6)", u.Replaced)
	}
	for _, f := range rep.Faults {
		if f.Kind == StepUpgrade && f.Error != "" {
			t.Errorf("upgrade step %s: %s", f.Target, f.Error)
		}
	}
	passed(t, rep, 1000)
}

// TestChaosNamespaceUpgrade moves a loaded run to a new namespace: a second
// applier group, the serve processes one at a time on one source pool, the
// old namespace drained by its deadlines as `tidemark status` shows it. No
// answer may break the promise, and the source reads Postgres counts stay
// within the one budget (a budget per namespace would double it: the new
// namespace starts cold, so its misses ask for more than the budget).
func TestChaosNamespaceUpgrade(t *testing.T) {
	t.Parallel() // see TestChaosRollingUpgrade
	cfg := testConfig(t, testenv.Binary(t))
	cfg.UpgradeNamespace = "catalog2"
	cfg.Duration, cfg.Seed, cfg.Faults = 100*time.Second, 29, []string{"none"}
	cfg.SourceBudget = 100
	rep := run(t, cfg)
	u := rep.Upgrade
	if u == nil || !u.Done() {
		t.Fatalf("the namespace upgrade was not carried out: %+v", u)
	}
	var sawBoth, sawDraining, sawDrained bool
	for _, s := range u.Status {
		both := strings.Contains(s, "catalog2: "+rollout.NamespaceServing)
		sawBoth = sawBoth || (both && strings.Contains(s, "catalog: "+rollout.NamespaceServing))
		sawDraining = sawDraining || (both && strings.Contains(s, "catalog: "+rollout.NamespaceDraining))
		sawDrained = sawDrained || (both && strings.Contains(s, "catalog: drained"))
	}
	if !sawBoth || !sawDraining || !sawDrained {
		t.Errorf("status did not show the transition (both serving %v, old draining %v, old drained %v): %q", sawBoth, sawDraining, sawDrained, u.Status)
	}
	passed(t, rep, 1000)
}
