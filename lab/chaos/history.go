package chaos

import (
	"sort"
	"time"
)

// Answer is one API response as the harness saw it: what was asked, when the
// request left and when the whole response had arrived, and what came back.
// The server sent it at some instant in [Sent, Received].
type Answer struct {
	Seq        int64     `json:"seq"`
	Tenant     string    `json:"tenant"`
	Item       string    `json:"item"`
	MinVersion int64     `json:"min_version,omitempty"`
	Serve      int       `json:"serve"` // which serve process answered
	Sent       time.Time `json:"sent"`
	Received   time.Time `json:"received"`
	Status     int       `json:"status"` // 0: no HTTP answer (connection refused, timeout)
	Version    int64     `json:"version,omitempty"`
	// What the payload says about itself (seeded with tenant, item, version).
	PayloadTenant  string `json:"payload_tenant,omitempty"`
	PayloadItem    string `json:"payload_item,omitempty"`
	PayloadVersion int64  `json:"payload_version,omitempty"`
	// PayloadUnbumped is the marker an unbumped write left in the payload.
	PayloadUnbumped int64 `json:"payload_unbumped,omitempty"`
	// PayloadTable names the table of a row of another table than the
	// catalog's (the fault second-table-reader's rows say so; the
	// catalog's never do).
	PayloadTable string `json:"payload_table,omitempty"`
	// For a 304 (a client cache revalidating with If-None-Match), the
	// payload fields are the stored body's, which the 304 vouched for.
	CacheStatus string `json:"cache_status,omitempty"`
	Cold        bool   `json:"cold,omitempty"` // part of a cold-read burst
}

// Commit is one committed version of an item in the source, with the exact
// commit time Postgres recorded (track_commit_timestamp).
type Commit struct {
	Tenant  string    `json:"tenant"`
	Item    string    `json:"item"`
	Version int64     `json:"version"`
	Deleted bool      `json:"deleted,omitempty"`
	At      time.Time `json:"at"`
	// A commit is visible to new snapshots a moment after its commit
	// timestamp, or much later when the committing backend waits (for a
	// synchronous standby): until then the version before it is what the
	// source shows. When a snapshot taken after At did not see the commit,
	// VisibleAfter is that snapshot's instant and VisibleBy the instant of
	// the first snapshot that saw it; both are zero otherwise (visible at
	// At, as far as the history can tell).
	VisibleAfter time.Time `json:"visible_after,omitzero"`
	VisibleBy    time.Time `json:"visible_by,omitzero"`
}

// visibleAfter is the latest instant the commit is known not to have been
// visible before (a lower bound of its visibility).
func (c Commit) visibleAfter() time.Time {
	if c.VisibleAfter.After(c.At) {
		return c.VisibleAfter
	}
	return c.At
}

// visibleBy is the instant by which the commit was surely visible (an
// upper bound): the checker says a version was replaced only from then.
func (c Commit) visibleBy() time.Time {
	if c.VisibleBy.After(c.At) {
		return c.VisibleBy
	}
	return c.At
}

type itemKey struct{ tenant, item string }

// Unbumped is a write that changed an item's payload without a new version
// (the fault unbumped-write): from VisibleBy on (the write's COMMIT had
// returned), an answer at Version must carry Marker, or a later one, in its
// payload's "unbumped" field.
type Unbumped struct {
	Tenant, Item    string
	Version, Marker int64
	VisibleBy       time.Time
}

// Source is the commit history of every item, versions in order. For one row
// commit order is version order: the row lock serialises its writers.
type Source struct {
	items    map[itemKey][]Commit
	unbumped map[itemKey][]Unbumped
	pruned   map[itemKey]bool // older versions were forgotten by Prune
	n        int
}

// NewSource returns an empty history.
func NewSource() *Source {
	return &Source{items: map[itemKey][]Commit{}, unbumped: map[itemKey][]Unbumped{}, pruned: map[itemKey]bool{}}
}

// AddUnbumped records a write that kept the item's version.
func (s *Source) AddUnbumped(u Unbumped) {
	k := itemKey{u.Tenant, u.Item}
	s.unbumped[k] = append(s.unbumped[k], u)
}

// Add records a commit; a version already known is ignored (the loader
// re-reads recent transactions).
func (s *Source) Add(c Commit) {
	k := itemKey{c.Tenant, c.Item}
	h := s.items[k]
	i := sort.Search(len(h), func(i int) bool { return h[i].Version >= c.Version })
	if i < len(h) && h[i].Version == c.Version {
		return
	}
	h = append(h, Commit{})
	copy(h[i+1:], h[i:])
	h[i] = c
	s.items[k] = h
	s.n++
}

// Len is the number of commits recorded.
func (s *Source) Len() int { return s.n }

// History returns the commits of one item, oldest first (shared; do not modify).
func (s *Source) History(tenant, item string) []Commit { return s.items[itemKey{tenant, item}] }

// Prune forgets versions that stopped being current before cutoff, keeping
// the newest of those (it may still be needed as "the version before").
// Answers sent after cutoff + bound never need them.
func (s *Source) Prune(cutoff time.Time) {
	for k, h := range s.items {
		drop := 0
		for drop+1 < len(h) && h[drop+1].At.Before(cutoff) {
			drop++
		}
		if drop > 0 {
			s.items[k] = append([]Commit(nil), h[drop:]...)
			s.pruned[k] = true
			s.n -= drop
		}
	}
}
