package applier

import (
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/promise"
)

// Issue 36, item 3: `tidemark apply` of another namespace started with the
// first one's consumer group. Before commits carried the namespace it joined
// the group, took partitions, applied their invalidations to its own
// namespace and committed past them, so the first applier resumed after
// invalidations its namespace never got. Now it refuses before it joins,
// naming both namespaces, and every key of the first namespace reaches its
// final floor. Both appliers are real processes.
func TestApplierOfAnotherNamespaceRefusesTheGroup(t *testing.T) {
	r := newRig(t, 4)
	group := r.group()
	r.startBinary(group, "--namespace", testNS)
	r.waitMembers(group, 1)
	final := map[string]int64{}
	r.wave(final, "a", 0, 400, 80)
	r.waitFloors(30*time.Second, final)
	// Every partition has committed under testNS by now (the floors are
	// applied and commits follow within 100 ms); wait for it so the rogue
	// has something to be refused by.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		n := 0
		for _, o := range r.fetchOffsets(group) {
			if ns, ok := CommitNamespace(o.Metadata); ok && ns == testNS {
				n++
			}
		}
		if n == int(r.partitions) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("want all %d partitions committed for namespace %s, got %d: %v", r.partitions, testNS, n, r.fetchOffsets(group))
		}
	}

	rogue := r.startBinary(group, "--namespace", "catalog2")
	// The rogue runs for a few seconds (as in the issue, 4 s) while changes
	// arrive; then it is killed if it is still there.
	r.wave(final, "a", 1000, 400, 80)
	select {
	case <-rogue.Done():
	case <-time.After(4 * time.Second):
		rogue.Kill()
		t.Errorf("want the applier of namespace catalog2 to refuse group %s at once, got it running 4 s later", group)
	}
	out := strings.ReplaceAll(rogue.Output(), `\"`, `"`) // the log quotes the error
	for _, want := range []string{`namespace "catalog"`, `namespace "catalog2"`, GroupFor("catalog2")} {
		if !strings.Contains(out, want) {
			t.Errorf("want the rogue applier's error to name %s, got:\n%s", want, rogue.Tail(2000))
		}
	}
	if strings.Contains(out, "partitions assigned") {
		t.Errorf("want the rogue applier refused before it joins the group, got it assigned partitions")
	}
	r.wave(final, "a", 2000, 400, 80)
	r.waitFloors(30*time.Second, final)
}

func TestGroupForFollowsTheNamespace(t *testing.T) {
	if got := GroupFor(promise.Namespace); got != promise.Group {
		t.Errorf("GroupFor(%q) = %q, want %q (the group every deployment has used)", promise.Namespace, got, promise.Group)
	}
	if a, b := GroupFor("catalog2"), GroupFor("catalog3"); a == b || a == promise.Group {
		t.Errorf("want namespaces their own default groups, got %q and %q", a, b)
	}
	for _, md := range []string{commitMetadata("shop", nil), commitMetadata("shop", &Stall{Op: "invalidate batch", Error: "OOM x"})} {
		if ns, ok := CommitNamespace(md); !ok || ns != "shop" {
			t.Errorf("CommitNamespace(%q) = %q, %v; want shop", md, ns, ok)
		}
	}
	if st, ok := ParseStall(commitMetadata("shop", &Stall{Op: "invalidate batch", Error: "OOM x"})); !ok || st.Error != "OOM x" {
		t.Errorf("want the stall note after the namespace, got %+v %v", st, ok)
	}
}
