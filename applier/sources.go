package applier

import (
	"sync"
	"time"

	"github.com/tidemark/tidemark/promise"
)

// sourceWindow is how recently another source's resolved marker must have
// reached a partition for this one's to be held: three times the longest
// heartbeat interval capture accepts, so two live captures' markers always
// fall within it of each other.
const sourceWindow = 3 * promise.MaxHeartbeat

// sourceGuard holds the watermark of a partition whose resolved markers
// come from more than one source (schema.Resolved.Source): two
// deployments' captures on one topic, each vouching for the other's
// cache. While both send, every marker of either is refused, so the
// watermark holds and the freshness SLO says so; a source that stopped
// sending for sourceWindow is forgotten (a restore to a new server).
// Markers that name no source (a capture before it was sent) are not
// judged.
type sourceGuard struct {
	mu     sync.Mutex
	seen   map[int32]map[string]time.Time // partition → source → when its marker last arrived
	warned time.Time                      // the last refusal logged
}

// conflict records a marker of source on partition at now and returns
// another source whose marker reached the partition within sourceWindow
// ("" when none: the marker may vouch).
func (g *sourceGuard) conflict(partition int32, source string, now time.Time) string {
	if source == "" {
		return ""
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.seen == nil {
		g.seen = map[int32]map[string]time.Time{}
	}
	srcs := g.seen[partition]
	if srcs == nil {
		srcs = map[string]time.Time{}
		g.seen[partition] = srcs
	}
	other := ""
	for s, at := range srcs {
		switch {
		case now.Sub(at) >= sourceWindow:
			delete(srcs, s)
		case s != source && other == "":
			other = s
		}
	}
	srcs[source] = now
	return other
}

// warnDue says whether a refusal at now is to be logged: at most once a
// minute.
func (g *sourceGuard) warnDue(now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if now.Sub(g.warned) < time.Minute {
		return false
	}
	g.warned = now
	return true
}
