package applier

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/promise"
)

// A consumer group is one namespace's: its committed offsets say what that
// namespace's keys have been invalidated up to, and nothing about any other
// namespace's. Every commit carries the namespace as the first part of its
// metadata (the stall note, when there is one, follows), and an applier
// refuses a group whose offsets were committed for another namespace: at
// start, before it joins (so a misconfigured applier never takes a
// partition from the right one), and at every assignment, before it
// consumes. Refusing is the safe choice over rewinding: offsets committed
// for another namespace say nothing about what this namespace has applied,
// so any position this applier started from would be a guess, and a rogue
// process that kept going would move partitions away from the applier that
// owns them at every restart. Offsets committed without a namespace (a
// build before namespaces were recorded, or an operator's reset) are taken
// as this namespace's.

// nsTag starts the commit metadata of every partition.
const nsTag = "tidemark-ns="

// groupChecks is false only with the build tag tidemark_no_group_check
// (no_group_check.go), the chaos harness's build with this file's checks
// reverted: a group of another namespace is joined, and the namespace's
// identity record is not claimed with the group.
var groupChecks = true

// GroupFor is the default consumer group of a namespace: promise.Group for
// the default namespace (the group every deployment has used), and
// promise.Group + "." + namespace for any other, so the appliers of a
// namespace upgrade's new namespace never join the old one's group by
// default.
func GroupFor(namespace string) string {
	if namespace == promise.Namespace || namespace == "" {
		return promise.Group
	}
	return promise.Group + "." + namespace
}

// commitMetadata is the metadata of a partition's committed offset.
func commitMetadata(namespace string, st *Stall) string {
	md := nsTag + namespace
	if st != nil {
		md += " " + st.note()
	}
	return md
}

// CommitNamespace reads the namespace of a committed offset's metadata: ok
// is false for metadata written before namespaces were recorded.
func CommitNamespace(metadata string) (string, bool) {
	rest, ok := strings.CutPrefix(metadata, nsTag)
	if !ok {
		return "", false
	}
	ns, _, _ := strings.Cut(rest, " ")
	return ns, true
}

// ForeignGroupError is a consumer group whose committed offsets belong to
// another namespace than this applier's.
type ForeignGroupError struct {
	Group      string
	Namespace  string  // this applier's
	Other      string  // the namespace the offsets were committed for
	Partitions []int32 // the partitions that carry them
}

func (e *ForeignGroupError) Error() string {
	return fmt.Sprintf("applier: consumer group %q carries offsets committed for namespace %q (partitions %v) but this applier applies namespace %q: "+
		"a group is one namespace's, and applying %q from %q's offsets would leave %q's invalidations to nobody; "+
		"give this applier its own group (%q is namespace %q's default) or the namespace its group was committed for",
		e.Group, e.Other, e.Partitions, e.Namespace, e.Namespace, e.Other, e.Other, GroupFor(e.Namespace), e.Namespace)
}

// ErrForeignGroup matches a *ForeignGroupError with errors.Is.
var ErrForeignGroup = errors.New("applier: consumer group of another namespace")

// Is makes errors.Is(err, ErrForeignGroup) true.
func (e *ForeignGroupError) Is(target error) bool { return target == ErrForeignGroup }

// checkGroupNamespace fetches the group's committed offsets on the topic and
// returns a *ForeignGroupError when one of the partitions in only (all when
// nil) was committed for another namespace.
func (a *Applier) checkGroupNamespace(ctx context.Context, only []int32) error {
	if !groupChecks {
		return nil
	}
	var foreign map[string][]int32
	err := retry(ctx, backoff{a.cfg.BackoffMin, a.cfg.BackoffMax}, a.log, "fetch committed offsets' namespaces", func(ctx context.Context) error {
		resp, err := a.adm.FetchOffsets(ctx, a.cfg.Group)
		if errors.Is(err, kerr.GroupIDNotFound) {
			return nil // a new group: nothing committed
		}
		if err != nil {
			return err
		}
		foreign = map[string][]int32{}
		resp.Each(func(o kadm.OffsetResponse) {
			if o.Topic != a.cfg.Topic || o.Err != nil || o.At < 0 || (only != nil && !slices.Contains(only, o.Partition)) {
				return
			}
			if ns, ok := CommitNamespace(o.Metadata); ok && ns != a.ns {
				foreign[ns] = append(foreign[ns], o.Partition)
			}
		})
		return nil
	})
	if err != nil {
		return err
	}
	names := make([]string, 0, len(foreign))
	for ns := range foreign {
		names = append(names, ns)
	}
	if len(names) == 0 {
		return nil
	}
	sort.Strings(names)
	ps := foreign[names[0]]
	slices.Sort(ps)
	return &ForeignGroupError{Group: a.cfg.Group, Namespace: a.ns, Other: names[0], Partitions: ps}
}

// claimGroup binds the namespace's identity record (cache.Identity) to this
// applier's group, retrying Redis errors; a namespace bound to another group
// is refused (errors.Is cache.ErrIdentity): its appliers would split its
// partitions' invalidations over two groups' offsets.
func (a *Applier) claimGroup(ctx context.Context) error {
	if !groupChecks {
		return nil
	}
	var refused error
	err := retry(ctx, backoff{a.cfg.BackoffMin, a.cfg.BackoffMax}, a.log, "claim the namespace's group", func(ctx context.Context) error {
		err := a.cache.ClaimIdentity(ctx, cache.Identity{Group: a.cfg.Group})
		if errors.Is(err, cache.ErrIdentity) {
			refused = err
			return nil
		}
		return err
	})
	if refused != nil {
		return fmt.Errorf("applier: %w", refused)
	}
	return err
}

// reclaimGroup claims the group again while running (a record lost with its
// Redis node is rewritten); a refusal stops the stage, a Redis error waits
// for the next time.
func (a *Applier) reclaimGroup(ctx context.Context) {
	if !groupChecks {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := a.cache.ClaimIdentity(cctx, cache.Identity{Group: a.cfg.Group}); errors.Is(err, cache.ErrIdentity) {
		a.fail(fmt.Errorf("applier: %w", err))
	}
}
