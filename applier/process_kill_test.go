package applier

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/tidemark/lab/proc"
	"github.com/tidemark/tidemark/lab/testenv"
)

// startBinary runs `tidemark apply` for the rig's topic and group; extra
// flags override the defaults. kill on the result is a real kill -9: no
// revoke, no commit, no leave.
func (r *rig) startBinary(group string, extra ...string) *proc.Process {
	r.t.Helper()
	args := append([]string{"apply"}, proc.KafkaArgs(r.brokers, r.applyKafka)...)
	args = append(args, "--redis", r.redis.URL(), "--topic", r.topic, "--group", group, "--session-timeout", "1s", "--commit-interval", "100ms",
		"--metrics-addr=", "--log-level", "debug")
	p := proc.New(proc.Config{Name: "apply", Bin: testenv.Binary(r.t), Args: append(args, extra...)})
	if err := p.Start(); err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() {
		p.Kill()
		if r.t.Failed() {
			r.t.Logf("tidemark apply output:\n%s", p.Tail(4000))
		}
	})
	return p
}

// waitMembers waits until the group is stable with n members that all own
// partitions.
func (r *rig) waitMembers(group string, n int) {
	r.t.Helper()
	testenv.Eventually(r.t, 30*time.Second, fmt.Sprintf("%d members with partitions", n), func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		gs, err := r.adm.DescribeGroups(ctx, group)
		if err != nil {
			return err
		}
		g := gs[group]
		if g.State != "Stable" || len(g.Members) != n {
			return fmt.Errorf("state %s with %d members", g.State, len(g.Members))
		}
		for _, m := range g.Members {
			a, ok := m.Assigned.AsConsumer()
			if !ok || len(a.Topics) == 0 || len(a.Topics[0].Partitions) == 0 {
				return fmt.Errorf("member %s owns nothing", m.MemberID)
			}
		}
		return nil
	})
}

// wave produces count changes over keys items at versions above base.
func (r *rig) wave(final map[string]int64, prefix string, base int64, count, keys int) {
	r.t.Helper()
	seen := map[string]int64{}
	var recs []*kgo.Record
	for i := 0; i < count; i++ {
		item := fmt.Sprintf("%s-%d", prefix, i%keys)
		seen[item]++
		v := base + seen[item]
		recs = append(recs, changeRecord(change{"t1", item, v}, time.Now()))
		final[item] = max(final[item], v)
	}
	r.produce(r.prod, recs...)
}

// kill -9 of a real applier mid-stream, then a restart: every key reaches
// its final floor (nothing committed before it was applied). The kill must
// land mid-stream, after the group committed part of the wave and before
// every record was applied, or the crash path goes untested: an attempt
// that misses is repeated with a new wave, and the test fails if none hits.
func TestCrashKill9MidStream(t *testing.T) {
	r := newRig(t, 4)
	group := "g_" + r.topic
	final := map[string]int64{}
	const attempts = 5
	for attempt := 1; ; attempt++ {
		before := committedSoFar(r, group)
		// Versions above every earlier attempt's; one record per batch so
		// the wave takes many commit intervals to apply.
		r.wave(final, "c", int64(attempt)*100_000, 20000, 500)
		ends := r.endOffsets()
		p := r.startBinary(group, "--max-batch", "1")
		// A tight poll, not testenv.Eventually's backoff: the kill must
		// follow the first commit of the wave closely.
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			now, advanced := committedSoFar(r, group), false
			for part, off := range now {
				advanced = advanced || off > before[part]
			}
			if advanced {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("want the applier to commit part of the wave within 60 s, got committed %v (before the wave %v, end offsets %v)", now, before, ends)
			}
		}
		p.Kill()
		// The process is dead: the floors are what it applied. (Committed
		// offsets are only logged: committing past what was applied is the
		// fault the restart below must not be able to hide.)
		committed := committedSoFar(r, group)
		unapplied := r.checkFloors(final)
		if unapplied != nil {
			t.Logf("attempt %d: killed mid-stream: committed %v of end offsets %v; %v", attempt, committed, ends, unapplied)
			break
		}
		if attempt == attempts {
			t.Fatalf("want a kill -9 mid-stream (part of the wave committed, some records unapplied), got none in %d attempts; last: committed %v of end offsets %v, floors: %v",
				attempts, committed, ends, unapplied)
		}
		t.Logf("attempt %d: the applier had applied every record before the kill (committed %v of end offsets %v); again with a new wave", attempt, committed, ends)
	}
	// The restart must apply the rest of the killed wave; later changes go
	// to other keys so they cannot raise a key the restart failed to apply.
	r.wave(final, "d", 0, 2000, 500)
	r.startBinary(group)
	r.waitFloors(60*time.Second, final)
}

// committedSoFar is the group's committed offsets, none before the group
// first committed. A real broker's coordinator may not be ready yet (or be
// moving): retriable errors are asked again for up to 30 s.
func committedSoFar(r *rig, group string) map[int32]int64 {
	r.t.Helper()
	var resp kadm.OffsetResponses
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var err error
		resp, err = r.adm.FetchOffsets(ctx, group)
		cancel()
		if errors.Is(err, kerr.GroupIDNotFound) {
			return map[int32]int64{}
		}
		if err == nil {
			break
		}
		if !kerr.IsRetriable(err) && !errors.Is(err, context.DeadlineExceeded) || time.Now().After(deadline) {
			r.t.Fatalf("fetch offsets of %s: want them, got %v", group, err)
		}
	}
	out := map[int32]int64{}
	for p, o := range resp[r.topic] {
		if o.Err == nil {
			out[p] = o.At
		}
	}
	return out
}

// Two and three appliers in one group, one (a real process) killed: its
// partitions are applied by the others within 15 s.
func TestGroupMemberKilled(t *testing.T) {
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d_appliers", n), func(t *testing.T) {
			r := newRig(t, 6)
			cfg := r.config()
			for i := 0; i < n-1; i++ {
				r.start(cfg, nil)
			}
			p := r.startBinary(cfg.Group)
			r.waitMembers(cfg.Group, n)
			final := map[string]int64{}
			r.wave(final, "g", 0, 600, 120)
			r.waitFloors(20*time.Second, final)
			p.Kill()
			killed := time.Now()
			r.wave(final, "g", 100, 600, 120)
			r.waitFloors(15*time.Second-time.Since(killed), final)
			t.Logf("the killed applier's partitions were applied %s after the kill", time.Since(killed).Round(time.Millisecond))
			if !strings.Contains(p.Output(), "partitions assigned") {
				t.Fatal("the killed applier never owned partitions")
			}
		})
	}
}
