package cache

import (
	"time"
)

// A watermark vouches for the changes of one stream: a source's server,
// database and table (schema.Resolved.Source). Two deployments whose
// captures write to one topic each see the other's resolved markers; while
// one's capture is down the other's would extend its cached values past
// changes nobody captured. The appliers record each partition watermark's
// source beside it (WATERMARK's s<N>), and a client told its own source
// (SetSource: serve, from its database) trusts a watermark only where every
// partition's is its own; otherwise W is unknown (values live by their own
// deadlines, and the watermark-age alerts fire).

// ForeignWatermark says a partition's watermark was set by a marker of
// another source than this process's.
type ForeignWatermark struct {
	Partition int32
	Source    string // the marker's
	Own       string // this process's (SetSource)
}

// ExpectSource makes W unknown to this client until SetSource tells it
// its own source: a process that knows its source (serve) calls it before
// its first poll.
func (c *Client) ExpectSource() { c.expectSource.Store(true) }

// SetSource sets this process's own source (schema.SourceName): from the
// next poll on, a partition watermark another source set makes W unknown.
func (c *Client) SetSource(source string) {
	c.expectSource.Store(true)
	c.source.Store(&source)
}

// judgeSource is wm as this client may trust it (above). A partition
// whose marker named no source (an older capture or applier) is not judged.
func (c *Client) judgeSource(wm Watermark) Watermark {
	if !c.expectSource.Load() {
		return wm
	}
	own := c.source.Load()
	if own == nil {
		wm.Known, wm.W = false, time.Time{}
		return wm
	}
	foreign := 0
	for p := range int32(wm.Partitions) {
		s, ok := wm.Sources[p]
		if !ok || s == *own {
			continue
		}
		if foreign == 0 {
			wm.Foreign = &ForeignWatermark{Partition: p, Source: s, Own: *own}
		}
		foreign++
	}
	c.m.wmForeign.Set(float64(foreign))
	if wm.Foreign != nil {
		wm.Known, wm.W = false, time.Time{}
	}
	c.warnForeign(wm.Foreign, foreign)
	return wm
}

// warnForeign logs a foreign watermark when it appears or names another
// source, and at most once a minute while it stays; and when it is gone.
func (c *Client) warnForeign(f *ForeignWatermark, n int) {
	now := time.Now()
	c.foreignMu.Lock()
	defer c.foreignMu.Unlock()
	switch {
	case f == nil && c.foreignSeen != "":
		c.foreignSeen = ""
		c.log.Info("every partition's watermark is this deployment's source's again")
	case f != nil && (f.Source != c.foreignSeen || now.Sub(c.foreignWarned) >= time.Minute):
		c.foreignSeen, c.foreignWarned = f.Source, now
		c.log.Error("partition watermarks were set by resolved markers of another source than this deployment's: two deployments' captures write to one topic; nothing is extended by the watermark while it lasts (give each deployment its own topic and slot)",
			"partition", f.Partition, "source", f.Source, "own", f.Own, "foreign_partitions", n)
	}
}
