package applier

import (
	"encoding/json"
	"strings"
	"time"
)

// Stall is a partition the applier cannot move: a Redis call for its next
// record keeps failing, so the partition holds (its offset and watermark do
// not move) until the call succeeds.
//
// The applier publishes it as the metadata of the partition's committed
// offset in the consumer group, where `tidemark status` reads it: Kafka
// takes the commit while Redis refuses writes, which the watermark hash
// cannot. The note follows the namespace every commit carries (group.go).
type Stall struct {
	Since time.Time `json:"stalled_since"`
	Op    string    `json:"op"`    // what was being written, e.g. "invalidate batch"
	Error string    `json:"error"` // the last error, e.g. the Redis reply
}

// stallTag starts every stall note, so other metadata is never mistaken for one.
const stallTag = "tidemark-stall "

// maxStallError bounds the error text kept: Kafka caps commit metadata
// (offset.metadata.max.bytes, 4096 by default).
const maxStallError = 1024

// note is the commit metadata for s.
func (s Stall) note() string {
	if len(s.Error) > maxStallError {
		s.Error = s.Error[:maxStallError] + "..."
	}
	b, _ := json.Marshal(s) // cannot fail: strings and a time
	return stallTag + string(b)
}

// ParseStall reads the commit metadata of a partition: ok is false for a
// partition that is not stalled.
func ParseStall(metadata string) (Stall, bool) {
	if rest, ok := strings.CutPrefix(metadata, nsTag); ok {
		_, metadata, _ = strings.Cut(rest, " ") // the namespace first (group.go)
	}
	rest, ok := strings.CutPrefix(metadata, stallTag)
	if !ok {
		return Stall{}, false
	}
	var s Stall
	if err := json.Unmarshal([]byte(rest), &s); err != nil {
		return Stall{}, false
	}
	return s, true
}

// noteStall is the processor's stall hook: it records on the partition's
// worker that a Redis call keeps failing (err) or works again (nil). The
// committer publishes the change.
func (a *Applier) noteStall(p int32, what string, err error) {
	a.mu.Lock()
	w := a.workers[p]
	a.mu.Unlock()
	if w == nil {
		return
	}
	w.qmu.Lock()
	defer w.qmu.Unlock()
	if err == nil {
		if w.stall != nil {
			a.log.Info("partition no longer stalled", "partition", p, "op", what, "stalled_for", time.Since(w.stall.Since).Round(time.Millisecond))
		}
		w.stall = nil
		return
	}
	if w.stall == nil {
		w.stall = &Stall{Since: time.Now()}
		a.met.stalls.Inc()
		a.log.Warn("partition stalled: holding it until Redis takes the write", "partition", p, "op", what, "err", err)
	}
	w.stall.Op, w.stall.Error = what, err.Error()
}
