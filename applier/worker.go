package applier

import (
	"context"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// worker applies one partition's records in order. The poll loop hands it
// fetched records (never blocking: a long queue pauses the partition's
// fetching instead), it applies them and records how far it got, and the
// committer commits that.
type worker struct {
	p      int32
	a      *Applier
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	notify chan struct{}

	// qmu guards the rest: shared with the poll loop, the committer and the
	// metrics loop. Lock order: Applier.commitMu, Applier.mu, worker.qmu.
	qmu          sync.Mutex
	epoch        uint64 // bumped by a rewind: queued records of older epochs are dropped
	queue        []queued
	queuedN      int
	paused       bool
	pendingSince time.Time // timestamp of the oldest record fetched and not applied
	hw           int64     // partition high watermark from the latest fetch
	firstSeen    int64     // first offset fetched this epoch (-1 none): the position before anything is applied
	next         int64     // offset after the last applied record (-1 none)
	leaderEpoch  int32
	committed    int64     // what the last successful commit stored (-1 none)
	committedMD  string    // the metadata it stored with it
	stall        *Stall    // set while a Redis call for the next record keeps failing
	appliedTime  time.Time // newest event time applied
	resolvedAt   time.Time // newest watermark written
}

type queued struct {
	epoch uint64
	recs  []*kgo.Record
}

func newWorker(a *Applier, p int32) *worker {
	ctx, cancel := context.WithCancel(context.Background())
	return &worker{p: p, a: a, ctx: ctx, cancel: cancel, done: make(chan struct{}), notify: make(chan struct{}, 1),
		hw: -1, firstSeen: -1, next: -1, committed: -1, leaderEpoch: -1}
}

// enqueue is called by the poll loop; it reports whether the partition
// should be paused.
func (w *worker) enqueue(recs []*kgo.Record, hw int64) (pause bool) {
	w.qmu.Lock()
	w.queue = append(w.queue, queued{epoch: w.epoch, recs: recs})
	w.queuedN += len(recs)
	w.hw = hw
	if w.firstSeen < 0 {
		w.firstSeen = recs[0].Offset
	}
	if w.pendingSince.IsZero() {
		w.pendingSince = recs[0].Timestamp
	}
	if w.queuedN > w.a.cfg.MaxQueue && !w.paused {
		w.paused, pause = true, true
	}
	w.qmu.Unlock()
	select {
	case w.notify <- struct{}{}:
	default:
	}
	return pause
}

// take removes queued records of the current epoch, up to about max.
func (w *worker) take(max int) (recs []*kgo.Record, epoch uint64, resume bool) {
	w.qmu.Lock()
	defer w.qmu.Unlock()
	epoch = w.epoch
	for len(w.queue) > 0 && len(recs) < max {
		q := w.queue[0]
		w.queue = w.queue[1:]
		w.queuedN -= len(q.recs)
		if q.epoch != epoch {
			continue
		}
		recs = append(recs, q.recs...)
	}
	if w.paused && w.queuedN <= w.a.cfg.MaxQueue/2 {
		w.paused, resume = false, true
	}
	return recs, epoch, resume
}

func (w *worker) run() {
	defer close(w.done)
	for {
		select {
		case <-w.ctx.Done():
			return
		case <-w.notify:
		}
		for {
			recs, epoch, resume := w.take(w.a.cfg.MaxBatch)
			if resume {
				w.a.cl.ResumeFetchPartitions(map[string][]int32{w.a.cfg.Topic: {w.p}})
			}
			if len(recs) == 0 {
				break
			}
			if len(recs) < w.a.cfg.MaxBatch && w.a.cfg.Linger > 0 {
				// A short linger lets a trickle of records share one round trip.
				t := time.NewTimer(w.a.cfg.Linger)
				select {
				case <-w.ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
				more, _, _ := w.take(w.a.cfg.MaxBatch - len(recs))
				recs = append(recs, more...)
			}
			err := w.a.proc.process(w.ctx, w.p, recs, func(rec *kgo.Record, t time.Time, wm bool) { w.applied(epoch, rec, t, wm) })
			if err != nil {
				if w.ctx.Err() == nil {
					w.a.fail(err)
				}
				return
			}
			w.qmu.Lock()
			if len(w.queue) == 0 {
				w.pendingSince = time.Time{}
			} else {
				w.pendingSince = w.queue[0].recs[0].Timestamp
			}
			w.qmu.Unlock()
		}
	}
}

// applied records progress; a rewind since the batch was taken wins.
func (w *worker) applied(epoch uint64, rec *kgo.Record, t time.Time, watermark bool) {
	w.qmu.Lock()
	defer w.qmu.Unlock()
	if watermark {
		if t.After(w.resolvedAt) {
			w.resolvedAt = t
		}
	}
	if epoch != w.epoch {
		return
	}
	w.next, w.leaderEpoch = rec.Offset+1, rec.LeaderEpoch
	if t.After(w.appliedTime) {
		w.appliedTime = t
	}
}

// stop cancels the worker (an in-flight retry ends at once) and waits.
func (w *worker) stop() {
	w.cancel()
	<-w.done
}

// toCommit returns the offset to commit and its metadata (the namespace,
// then the stall note if any), if either changed since the last commit. A partition stalled
// before applying anything commits the position it started from, so the
// note has an offset to ride on.
func (w *worker) toCommit() (kgo.EpochOffset, string, bool) {
	w.qmu.Lock()
	defer w.qmu.Unlock()
	md := commitMetadata(w.a.ns, w.stall)
	eo := kgo.EpochOffset{Epoch: w.leaderEpoch, Offset: w.next}
	if w.next < 0 {
		if w.stall == nil || w.firstSeen < 0 {
			return kgo.EpochOffset{}, "", false
		}
		eo = kgo.EpochOffset{Epoch: -1, Offset: w.firstSeen}
	}
	if eo.Offset == w.committed && md == w.committedMD {
		return kgo.EpochOffset{}, "", false
	}
	return eo, md, true
}

func (w *worker) markCommitted(off int64, md string) {
	w.qmu.Lock()
	w.committed, w.committedMD = off, md
	w.qmu.Unlock()
}
