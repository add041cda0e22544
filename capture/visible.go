package capture

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
)

// Visibility: a decoded transaction is produced only once it is visible to
// new snapshots.
//
// A walsender decodes a commit once its WAL is flushed locally, but the
// committing backend leaves the running set (ProcArray) only after its
// synchronous-replication wait: with a synchronous standby that does not
// answer, the commit is decoded while every new snapshot still sees the old
// row. An invalidation sent then would be undone by a reader filling the old
// version after the floor expires (docs/design.md, "A commit is invalidated
// only once it is visible"). So a transaction is held from its BEGIN
// (pgoutput proto 1 sends BEGIN only after the commit was decoded) until a
// snapshot shows its xid finished.
//
// The check is off the stream's path: a checker goroutine takes snapshots on
// its own connection (a prepared query, parsed by hand). A transaction the
// newest snapshot already shows ended streams at once; otherwise it (its
// BEGIN kept in heldWAL) waits for the next snapshot, and the stream behind
// it waits unread in the socket: what the walsender decodes while the query
// is in flight is read in one go once the snapshot is in, and that snapshot
// answers for every transaction in it that was visible when it was taken. A
// burst costs one query, not one each, and a visible transaction waits on
// no query of its own.

// snapshot is one pg_current_snapshot(): full (epoch-qualified) bounds and
// the xids it saw running.
type snapshot struct {
	xmin, xmax uint64
	xip        []uint64
	asked      time.Time // when its query was sent
}

// parseSnapshot reads pg_snapshot's text form, "xmin:xmax:xip,xip,...".
func parseSnapshot(b []byte) (*snapshot, error) {
	bad := func() error {
		return fmt.Errorf("capture: visibility snapshot %q: not xmin:xmax:xip", b)
	}
	f := bytes.SplitN(b, []byte{':'}, 3)
	if len(f) != 3 {
		return nil, bad()
	}
	xmin, err1 := strconv.ParseUint(string(f[0]), 10, 64)
	xmax, err2 := strconv.ParseUint(string(f[1]), 10, 64)
	if err1 != nil || err2 != nil || xmin > xmax {
		return nil, bad()
	}
	sn := &snapshot{xmin: xmin, xmax: xmax}
	for x := range bytes.SplitSeq(f[2], []byte{','}) {
		if len(x) == 0 {
			continue
		}
		v, err := strconv.ParseUint(string(x), 10, 64)
		if err != nil {
			return nil, bad()
		}
		sn.xip = append(sn.xip, v)
	}
	return sn, nil
}

// full widens a 32-bit xid to the epoch of the snapshot. A live xid lies
// within 2^31 of xmax either way (wraparound protection): below it, it is
// xmax less the modular distance; at or above it (assigned after the
// snapshot was taken), it is reported as xmax, "not ended".
func (sn *snapshot) full(xid uint32) uint64 {
	d := uint64(uint32(sn.xmax) - xid) // modular distance below xmax
	if d == 0 || d > 1<<31 || d > sn.xmax {
		return sn.xmax
	}
	return sn.xmax - d
}

// ended reports whether the snapshot shows xid finished (committed and out
// of the running set); false means "ask a newer snapshot". A nil snapshot
// knows nothing.
func (sn *snapshot) ended(xid uint32) bool {
	if sn == nil {
		return false
	}
	f := sn.full(xid)
	if f >= sn.xmax {
		return false
	}
	if f < sn.xmin {
		return true
	}
	for _, x := range sn.xip {
		if x == f {
			return false
		}
	}
	return true
}

// beginXid is the xid of a pgoutput BEGIN message (Byte1 'B', Int64 final
// LSN, Int64 commit time, Int32 xid); ok is false for any other message.
func beginXid(data []byte) (xid uint32, ok bool) {
	if len(data) < 21 || data[0] != 'B' {
		return 0, false
	}
	return binary.BigEndian.Uint32(data[17:21]), true
}

const snapshotStmt = "tidemark_capture_snapshot"

// checkTimeout bounds one snapshot query.
const checkTimeout = 5 * time.Second

// visibility is the checker: it takes a snapshot whenever the streamer
// holds a transaction the newest snapshot does not show ended, and
// publishes each. It watches the first held transaction (head) and the
// last one read (last): a held transaction read while a query was in
// flight starts the next query as soon as that one returns.
type visibility struct {
	conn *pgconn.PgConn
	// Both pack an xid; 0 (never assigned): none.
	head atomic.Uint32 // the held transaction
	last atomic.Uint32 // the newest transaction behind it
	ask  chan struct{} // cap 1: head or last was set
	snap atomic.Pointer[snapshot]
	// ready is signalled (coalesced) after each snapshot or failure.
	ready  chan struct{}
	err    atomic.Pointer[error]
	checks prometheus.Counter // snapshots taken
	delay  time.Duration      // before each query (tests: a distant Postgres)
}

func newVisibility(ctx context.Context, conn *pgconn.PgConn, checks prometheus.Counter, delay time.Duration) (*visibility, error) {
	if _, err := conn.Prepare(ctx, snapshotStmt, "SELECT pg_current_snapshot()::text", nil); err != nil {
		return nil, fmt.Errorf("capture: prepare visibility snapshot: %w", err)
	}
	return &visibility{conn: conn, ask: make(chan struct{}, 1), ready: make(chan struct{}, 1), checks: checks, delay: delay}, nil
}

func (v *visibility) poke() {
	select {
	case v.ask <- struct{}{}:
	default:
	}
}

// failed is the checker's error once it stopped on one.
func (v *visibility) failed() error {
	if p := v.err.Load(); p != nil {
		return *p
	}
	return nil
}

// run takes snapshots until ctx ends or a query fails (then failed reports
// the error and the streamer returns it).
//
// The usual wait is a committing backend that has flushed but not yet left
// the running set: microseconds, longer only when it is not scheduled. So a
// held transaction the first snapshot after it does not show ended is asked
// again at once, then after 200 µs, backing off to 250 ms: a synchronous
// standby's wait.
func (v *visibility) run(ctx context.Context) {
	sock := v.conn.Conn()
	stop := context.AfterFunc(ctx, func() { sock.SetDeadline(time.Now()) })
	defer stop()
	var missed uint64 // the (head, last) the newest snapshot did not show ended
	misses := 0
	for {
		h, l := v.head.Load(), v.last.Load()
		sn := v.snap.Load()
		if (h == 0 || sn.ended(h)) && (l == 0 || sn.ended(l)) {
			select {
			case <-ctx.Done():
				return
			case <-v.ask:
			}
			continue
		}
		want := uint64(h)<<32 | uint64(l)
		if wait := v.backoff(want == missed, misses); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		sn, err := v.query()
		if err != nil {
			if ctx.Err() == nil {
				v.err.Store(&err)
				v.publish()
			}
			return
		}
		v.snap.Store(sn)
		v.publish()
		if (h != 0 && !sn.ended(h)) || (l != 0 && !sn.ended(l)) {
			if want == missed {
				misses = min(misses+1, 20)
			} else {
				missed, misses = want, 1
			}
		}
	}
}

// backoff is the pause before the next query: none for a new head or the
// first retry, then 200 µs doubling to 250 ms; plus the test delay.
func (v *visibility) backoff(same bool, misses int) time.Duration {
	if !same || misses < 2 {
		return v.delay
	}
	return v.delay + min(200*time.Microsecond<<(misses-2), 250*time.Millisecond)
}

func (v *visibility) publish() {
	select {
	case v.ready <- struct{}{}:
	default:
	}
}

// query takes one snapshot. The socket deadline bounds it (a context per
// query would cost a watcher per query); cancelling run's ctx moves the
// deadline to now.
func (v *visibility) query() (*snapshot, error) {
	asked := time.Now()
	v.conn.Conn().SetDeadline(asked.Add(checkTimeout))
	res := v.conn.ExecPrepared(context.Background(), snapshotStmt, nil, nil, nil).Read()
	v.checks.Inc()
	if res.Err != nil {
		return nil, fmt.Errorf("capture: visibility snapshot: %w", res.Err)
	}
	if len(res.Rows) != 1 || len(res.Rows[0]) != 1 {
		return nil, errors.New("capture: visibility snapshot: expected one row")
	}
	sn, err := parseSnapshot(res.Rows[0][0])
	if err != nil {
		return nil, err
	}
	sn.asked = asked
	return sn, nil
}

// heldWAL keeps, in stream order and copied out of the connection's read
// buffer, the messages from a held transaction's BEGIN on (the streamer
// reads nothing more until a snapshot is in, so usually just that BEGIN).
type heldWAL struct {
	buf  []byte
	ends []int // end offset in buf of each message
	next int   // first message not yet replayed
}

func (h *heldWAL) empty() bool { return h.next == len(h.ends) }

func (h *heldWAL) push(data []byte) {
	h.buf = append(h.buf, data...)
	h.ends = append(h.ends, len(h.buf))
}

func (h *heldWAL) start() int {
	if h.next == 0 {
		return 0
	}
	return h.ends[h.next-1]
}

// peek is the next message; valid until the next push.
func (h *heldWAL) peek() []byte { return h.buf[h.start():h.ends[h.next]] }

func (h *heldWAL) pop() {
	h.next++
	if h.empty() {
		if cap(h.buf) > 1<<20 { // a large transaction's buffer is not kept
			h.buf, h.ends = nil, nil
		}
		h.buf, h.ends, h.next = h.buf[:0], h.ends[:0], 0
	}
}

// heldTxn is the streamer's state about the transaction at the head of
// heldWAL.
type heldTxn struct {
	xid    uint32
	at     time.Time // held since
	since  time.Time // a snapshot asked after at showed it running (zero: none yet)
	warned bool
}

// invisibleWarnAfter is how long a hold lasts before it is logged as a
// warning: shorter holds are a busy backend, not a stalled standby.
const invisibleWarnAfter = time.Second

// route hands one pgoutput message on: straight to wal while nothing is
// held and it is not a BEGIN the newest snapshot cannot vouch for, else
// behind the held transaction.
func (s *streamer) route(data []byte) error {
	if s.vis == nil {
		return s.wal(data)
	}
	if s.held.empty() {
		xid, ok := beginXid(data)
		if !ok || s.vis.snap.Load().ended(xid) {
			return s.wal(data)
		}
		s.head = heldTxn{xid: xid, at: time.Now()}
		s.vis.head.Store(xid)
	}
	if xid, ok := beginXid(data); ok {
		s.vis.last.Store(xid)
		s.vis.poke()
	}
	s.held.push(data)
	return nil
}

// replay streams held messages up to the first transaction the newest
// snapshot does not show ended, or until max records are in flight.
func (s *streamer) replay(max int64) error {
	sn := s.vis.snap.Load()
	s.seen, s.replayMore = sn, false
	for !s.held.empty() {
		if s.tr.Inflight() >= max {
			s.replayMore = true // the loop waits for acks, then replays on
			return nil
		}
		data := s.held.peek()
		if xid, ok := beginXid(data); ok {
			if !sn.ended(xid) {
				if xid != s.head.xid {
					s.head = heldTxn{xid: xid, at: time.Now()}
					s.vis.head.Store(xid)
					s.vis.poke()
				}
				s.stillHeld(sn)
				return nil
			}
			if xid == s.head.xid {
				s.release()
			}
		}
		if err := s.wal(data); err != nil {
			return err
		}
		s.held.pop()
	}
	s.vis.head.Store(0)
	s.vis.last.Store(0)
	return nil
}

// stillHeld notes that sn, maybe taken after the hold began, shows the
// head still running; a hold that lasts is logged.
func (s *streamer) stillHeld(sn *snapshot) {
	h := &s.head
	if sn == nil || !sn.asked.After(h.at) {
		return // asked before the hold: no news
	}
	if h.since.IsZero() {
		h.since = sn.asked
	}
	if held := time.Since(h.since); !h.warned && held >= invisibleWarnAfter {
		h.warned = true
		s.c.log.Warn("decoded commit is not yet visible to new snapshots (waiting for a synchronous standby?): holding its invalidations and the watermark until it is",
			"xid", h.xid, "held", held.Round(time.Millisecond))
	}
}

// release ends the head's hold: it is visible.
func (s *streamer) release() {
	h := &s.head
	if !h.since.IsZero() {
		held := time.Since(h.since)
		s.c.m.invisible.Add(held.Seconds())
		if h.warned {
			s.c.log.Info("decoded commit is visible now; streaming on", "xid", h.xid, "held", held.Round(time.Millisecond))
		}
	}
	*h = heldTxn{}
}

// waitSnapshot waits for the checker's next snapshot (or its failure),
// returning at the next status time so the loop sends status and the
// walsender does not time out.
func (s *streamer) waitSnapshot(ctx context.Context) error {
	t := time.NewTimer(time.Until(s.nextStatus))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case err := <-s.c.relay.Err():
		return err
	case <-s.vis.ready:
	case <-t.C:
	}
	return nil
}
