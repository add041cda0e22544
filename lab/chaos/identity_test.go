package chaos

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/lab/testenv"
)

// identityRun is a short run of one of the kinds that break a namespace's
// identity (faults_identity.go), the fault once, its items read past the
// bound, under a light load (lightLoad). The rogue applier's runs turn the auditor off: it repairs a value
// left behind its row within seconds, and the run is about what the group
// check alone prevents.
func identityRun(t *testing.T, binary, kind string) (*Report, FaultRecord) {
	cfg := testConfig(t, binary)
	cfg.Duration, cfg.Seed, cfg.Items, cfg.Faults = 60*time.Second, 40, 300, []string{kind}
	cfg.RateUpdates, cfg.RateReads = lightLoad()
	cfg.StageEnv = append(cfg.StageEnv, busyBoxLookup)
	cfg.FaultEvery = time.Minute // once
	if kind == FaultRogueApplier {
		cfg.StageEnv = append(cfg.StageEnv, "TIDEMARK_AUDIT_RATE=0")
	}
	rep := run(t, cfg)
	i := slices.IndexFunc(rep.Faults, func(f FaultRecord) bool { return f.Kind == kind })
	if i < 0 {
		t.Fatalf("%s was not injected", kind)
	}
	f := rep.Faults[i]
	if f.Error != "" {
		t.Errorf("%s: %s", kind, f.Error)
	}
	return rep, f
}

// TestChaosRogueApplier: an applier of another namespace started with the
// deployment's group is refused at start, and the items changed meanwhile
// reach every reader within the bound.
func TestChaosRogueApplier(t *testing.T) {
	t.Parallel() // see TestChaosRollingUpgrade
	rep, f := identityRun(t, testenv.Binary(t), FaultRogueApplier)
	if !strings.Contains(f.Target, "refused at start") || !strings.Contains(f.Target, "committed for namespace") {
		t.Errorf("want the rogue applier refused at start, naming the namespace its group's offsets were committed for, got %q", f.Target)
	}
	passed(t, rep, 300)
}

// TestChaosSecondTableReader: a serve of another table in the same
// namespace is refused at start; no answer carries its rows.
func TestChaosSecondTableReader(t *testing.T) {
	t.Parallel() // see TestChaosRollingUpgrade
	rep, f := identityRun(t, testenv.Binary(t), FaultSecondTable)
	if !strings.Contains(f.Target, "refused at start") || !strings.Contains(f.Target, SecondTable().Name) {
		t.Errorf("want the second table's reader refused at start, got %q", f.Target)
	}
	passed(t, rep, 300)
}

// TestChaosSharedTopic: a second deployment's capture on this topic while
// this one's captures are down vouches for nothing here: the items changed
// meanwhile are answered from the cache past the bound, and never stale.
func TestChaosSharedTopic(t *testing.T) {
	t.Parallel() // see TestChaosRollingUpgrade
	rep, f := identityRun(t, testenv.Binary(t), FaultSharedTopic)
	if !strings.Contains(f.Target, "second deployment") || strings.Contains(f.Target, neverJudged) {
		t.Errorf("want the fault's items read from the cache past the bound while a second deployment's capture sent markers, got %q", f.Target)
	}
	passed(t, rep, 300)
}

// TestChaosCatchesNoIdentity: with the namespace's identity reverted (tag
// tidemark_no_identity: a claim never refuses) the second reader fills the
// catalog's keys with its rows and the catalog's serve processes serve them.
func TestChaosCatchesNoIdentity(t *testing.T) {
	t.Parallel() // see TestChaosRollingUpgrade
	rep, f := identityRun(t, testenv.BinaryWithTags(t, "tidemark_no_identity"), FaultSecondTable)
	if rep.ByKind[KindForeignRow] == 0 {
		t.Fatalf("with the identity claim reverted, the second table's reader passed (%s): %d violations %v", f.Target, rep.Violations, rep.ByKind)
	}
}

// The rogue applier's assignment is read from its log, in slog's text
// format: one partition bare, several quoted, none ignored.
func TestAssignedPartitionsReadsTheApplierLog(t *testing.T) {
	for _, tc := range []struct{ log, want string }{
		{`time=… level=INFO msg="partitions assigned" component=applier partitions=[]`, ""},
		{`time=… level=INFO msg="partitions assigned" component=applier partitions=[4]`, "[4]"},
		{"time=… level=INFO msg=\"partitions assigned\" partitions=\"[2 3]\"\ntime=… level=INFO msg=\"partitions assigned\" partitions=[]", "[2 3]"},
		{`time=… level=INFO msg="partitions revoked" partitions="[2 3]"`, ""},
	} {
		if got := assignedPartitions(tc.log); got != tc.want {
			t.Errorf("assignedPartitions(%q) = %q, want %q", tc.log, got, tc.want)
		}
	}
}
