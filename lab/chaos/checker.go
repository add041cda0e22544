package chaos

import (
	"fmt"
	"net/http"
	"sort"
	"time"
)

// Kind names a way an answer breaks the freshness promise.
type Kind string

// The kinds of violation the checker reports.
const (
	// KindStale: a 200 whose version was not current at any instant of the
	// window [sent - bound, received].
	KindStale Kind = "stale"
	// KindUncommitted: a 200 with a version not yet committed when the answer
	// arrived, or never committed at all.
	KindUncommitted Kind = "uncommitted"
	// KindDeletedServed: a 200 with the version that deleted the item.
	KindDeletedServed Kind = "deleted-served"
	// KindBelowMin: a 200 below the min_version asked for.
	KindBelowMin Kind = "below-min-version"
	// KindWrong404: a 404 while the item existed during the whole window.
	KindWrong404 Kind = "wrong-404"
	// KindWrong412: a 412 while the source was at or above min_version
	// during the whole window.
	KindWrong412 Kind = "wrong-412"
	// KindWrongOwner: a payload seeded for another tenant or item.
	KindWrongOwner Kind = "wrong-owner"
	// KindPayload: a payload written for another version than the answer says.
	KindPayload Kind = "payload-mismatch"
	// KindETag: a 304 Not Modified that vouched for a body the client had
	// stored for another tenant (a client cache shared by two tenants'
	// keys revalidated one tenant's body with the other's key).
	KindETag Kind = "etag-cross-tenant"
	// KindMinVersionRefused: a 400 to a min_version read while the source
	// held that version (a write had produced it): refused although it
	// could be answered.
	KindMinVersionRefused Kind = "min-version-refused"
	// KindForeignRow: a 200 (or a 304) whose payload is a row of another
	// table than the catalog's, whatever its tenant, item and version
	// (the fault second-table-reader: a reader of another table in the
	// same namespace filled the catalog's key).
	KindForeignRow Kind = "foreign-row"
	// KindPipelineStopped: a change committed during a fault did not reach
	// the cache tier within the bound (judged by the fault, not from an
	// answer: bad-version-row's canary, cold-start's change).
	KindPipelineStopped Kind = "pipeline-stopped"
)

// Kinds lists every kind, in report order.
var Kinds = []Kind{KindStale, KindUncommitted, KindDeletedServed, KindBelowMin, KindWrong404, KindWrong412, KindWrongOwner, KindPayload,
	KindETag, KindMinVersionRefused, KindForeignRow, KindPipelineStopped}

// Violation is one answer the source history does not justify, with the
// evidence: the answer and the item's commits around it.
type Violation struct {
	Kind    Kind     `json:"kind"`
	Detail  string   `json:"detail"`
	Answer  Answer   `json:"answer"`
	History []Commit `json:"source_history"`
}

// Checker judges answers against the source history. It knows nothing of
// how the answers were produced.
type Checker struct {
	// Bound is the promise: every answer was true of the source at some
	// instant within Bound before it was sent.
	Bound time.Duration
}

// Verdict is the checker's judgement of one answer.
type Verdict struct {
	Violations []Violation
	// Age is, for a 200, how long before the request the served version had
	// stopped being current (0 if it was current at some instant of the
	// request): the least observation age the answer can have had.
	Age time.Duration
}

// Check judges one answer. src must hold every commit made before
// a.Received (the runner judges an answer only once the history is loaded
// past it).
func (c Checker) Check(a Answer, src *Source) Verdict {
	h := src.History(a.Tenant, a.Item)
	pruned := src.pruned[itemKey{a.Tenant, a.Item}]
	from, to := a.Sent.Add(-c.Bound), a.Received
	var out Verdict
	served := -1 // index of the served version in h, for the evidence
	bad := func(k Kind, format string, args ...any) {
		out.Violations = append(out.Violations, Violation{Kind: k, Detail: fmt.Sprintf(format, args...), Answer: a, History: around(h, served, from, to)})
	}
	status := a.Status
	if status == http.StatusNotModified {
		// A 304 vouches for the body the client stored: judged as that
		// body served now, once it is the asker's own.
		if a.PayloadTenant != a.Tenant {
			bad(KindETag, "304 to %s's revalidation vouched for a body stored for %s (%s/%s v%d)", a.Tenant, a.PayloadTenant, a.PayloadTenant, a.PayloadItem, a.PayloadVersion)
			return out
		}
		status = http.StatusOK
	}
	switch status {
	case http.StatusOK:
		if a.PayloadTable != "" {
			// No version of the item's history is this row.
			bad(KindForeignRow, "asked for %s/%s, payload is a row of %s (%s/%s v%d), not of the catalog table", a.Tenant, a.Item, a.PayloadTable,
				a.PayloadTenant, a.PayloadItem, a.PayloadVersion)
			return out
		}
		if a.PayloadTenant != a.Tenant || a.PayloadItem != a.Item {
			bad(KindWrongOwner, "asked for %s/%s, payload is %s/%s", a.Tenant, a.Item, a.PayloadTenant, a.PayloadItem)
		}
		if a.PayloadVersion != a.Version {
			bad(KindPayload, "answer says version %d, payload was written as version %d", a.Version, a.PayloadVersion)
		}
		if a.Version < a.MinVersion {
			bad(KindBelowMin, "version %d served for min_version=%d", a.Version, a.MinVersion)
		}
		i := sort.Search(len(h), func(i int) bool { return h[i].Version >= a.Version })
		if i < len(h) && h[i].Version == a.Version {
			served = i
		}
		switch {
		case served >= 0:
			cur := h[i]
			if vis := cur.visibleAfter(); vis.After(to) {
				bad(KindUncommitted, "version %d committed at %s (visible after %s), %s after the answer arrived", a.Version, ts(cur.At), ts(vis), vis.Sub(to))
			}
			if cur.Deleted {
				bad(KindDeletedServed, "version %d is the item's deletion", a.Version)
			}
			if i+1 < len(h) {
				next := h[i+1]
				by := next.visibleBy()
				if age := a.Sent.Sub(by); age > 0 {
					out.Age = age
				}
				if !by.After(from) {
					bad(KindStale, "version %d was replaced by %d at %s, %s before the request (bound %s)", a.Version, next.Version, ts(by), a.Sent.Sub(by), c.Bound)
				}
			}
			for _, u := range src.unbumped[itemKey{a.Tenant, a.Item}] {
				if u.Version == a.Version && !u.VisibleBy.After(from) && a.PayloadUnbumped < u.Marker {
					if age := a.Sent.Sub(u.VisibleBy); age > out.Age {
						out.Age = age
					}
					bad(KindStale, "version %d's payload was rewritten without a new version (marker %d) by %s, %s before the request (bound %s); the answer carries marker %d",
						a.Version, u.Marker, ts(u.VisibleBy), a.Sent.Sub(u.VisibleBy), c.Bound, a.PayloadUnbumped)
					break
				}
			}
		case i == 0 && pruned:
			// Older than every version kept: replaced long before the window.
			out.Age = a.Sent.Sub(h[0].At)
			bad(KindStale, "version %d was replaced before %s, more than %s before the request", a.Version, ts(h[0].At), a.Sent.Sub(h[0].At))
		default:
			bad(KindUncommitted, "version %d was never committed", a.Version)
		}
	case http.StatusNotFound:
		if !absentDuring(h, pruned, from, to) {
			bad(KindWrong404, "the item existed during the whole window [%s, %s]", ts(from), ts(to))
		}
	case http.StatusPreconditionFailed:
		if !belowDuring(h, pruned, a.MinVersion, from, to) {
			bad(KindWrong412, "the source was at or above min_version=%d during the whole window [%s, %s]", a.MinVersion, ts(from), ts(to))
		}
	case http.StatusBadRequest:
		if a.MinVersion <= 0 {
			break
		}
		for _, cm := range h {
			if cm.Version >= a.MinVersion && !cm.visibleBy().After(to) {
				bad(KindMinVersionRefused, "400 for min_version=%d although the source held version %d from %s", a.MinVersion, cm.Version, ts(cm.visibleBy()))
				break
			}
		}
	}
	return out
}

// current reports whether commit i of h was the item's state at some instant
// of [from, to]: committed by to, and not replaced by from.
func current(h []Commit, i int, from, to time.Time) bool {
	if h[i].visibleAfter().After(to) {
		return false
	}
	return i+1 == len(h) || h[i+1].visibleBy().After(from)
}

// absentDuring: at some instant of [from, to] the item did not exist yet or
// its current version was a deletion.
func absentDuring(h []Commit, pruned bool, from, to time.Time) bool {
	if len(h) == 0 || (!pruned && h[0].visibleBy().After(from)) {
		return true
	}
	for i := range h {
		if h[i].Deleted && current(h, i, from, to) {
			return true
		}
	}
	return false
}

// belowDuring: at some instant of [from, to] the source held no version of
// the item, or one below n.
func belowDuring(h []Commit, pruned bool, n int64, from, to time.Time) bool {
	if len(h) == 0 || (!pruned && h[0].visibleBy().After(from)) {
		return true
	}
	for i := range h {
		if h[i].Version < n && current(h, i, from, to) {
			return true
		}
	}
	return false
}

// around is the evidence: the served version (served >= 0) with the one
// before and after it, and the newest commits current at some instant of
// [from, to] with the one before them; at most 12, oldest first.
func around(h []Commit, served int, from, to time.Time) []Commit {
	pick := map[int]bool{}
	if served >= 0 {
		for i := max(0, served-1); i <= min(len(h)-1, served+1); i++ {
			pick[i] = true
		}
	}
	var cur []int
	for i := range h {
		if current(h, i, from, to) {
			cur = append(cur, i)
		}
	}
	if len(cur) == 0 {
		// Nothing current in the window: the newest commits before its end.
		if last := sort.Search(len(h), func(i int) bool { return h[i].At.After(to) }) - 1; last >= 0 {
			cur = []int{last}
		}
	}
	if len(cur) > 0 && cur[0] > 0 {
		cur = append([]int{cur[0] - 1}, cur...)
	}
	for j := len(cur) - 1; j >= 0 && len(pick) < 12; j-- {
		pick[cur[j]] = true
	}
	var out []Commit
	for i := range h {
		if pick[i] {
			out = append(out, h[i])
		}
	}
	if len(out) == 0 && len(h) > 0 {
		out = append(out, h[:min(len(h), 3)]...)
	}
	return out
}

func ts(t time.Time) string { return t.UTC().Format("15:04:05.000000") }
