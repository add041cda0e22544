package capture

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/tidemark/tidemark/relay"
	"github.com/tidemark/tidemark/schema"
)

// streamer reads one replication session. It runs on one goroutine: the
// producer's callbacks only touch the tracker.
type streamer struct {
	c          *Capture
	conn       *pgconn.PgConn
	dec        *decoder
	tr         *relay.Tracker
	partitions int
	grown      int // the largest fan-out so far (for the log)

	// The transaction being read (proto 1 sends only committed ones, so its
	// commit LSN and time are known from BEGIN).
	txn        *relay.Txn
	commitLSN  schema.LSN
	commitTime time.Time
	xid        uint32
	beat       time.Time // heartbeat-row update seen in this transaction

	sent       schema.LSN // last LSN sent in a standby status
	nextStatus time.Time
	vis        *visibility // nil: no visibility gate (tests of the decoder)
	held       heldWAL     // messages from a transaction not yet visible on
	head       heldTxn     // the transaction held at held's start
	seen       *snapshot   // the snapshot held was last replayed against
	replayMore bool        // replay stopped at the in-flight bound

	lastSkipLog time.Time // last warning about a skipped heartbeat

	// ctx is run's: fanout waits in it for records to be placed; unsure is
	// set when it ended first (nothing more is confirmed).
	ctx    context.Context
	unsure bool

	upserts, deletes, truncates prometheus.Counter

	source string // the resolved markers' Source (Capture.source)
}

func newStreamer(c *Capture, conn *pgconn.PgConn, partitions int, start schema.LSN) *streamer {
	return &streamer{
		c: c, conn: conn, dec: newDecoder(c.cfg), tr: relay.NewTracker(start), partitions: partitions, source: c.source(),
		upserts:   c.m.events.WithLabelValues(string(schema.OpUpsert)),
		deletes:   c.m.events.WithLabelValues(string(schema.OpDelete)),
		truncates: c.m.events.WithLabelValues(string(schema.OpTruncate)),
	}
}

// run reads until ctx ends or the connection fails.
func (s *streamer) run(ctx context.Context) error {
	s.ctx = ctx
	max := int64(s.c.cfg.Relay.MaxInflight)
	s.nextStatus = time.Now().Add(s.c.cfg.StatusInterval)
	// Reads use a socket deadline at the next status time instead of a
	// context per message (a context watch per message costs more than the
	// message); cancelling ctx moves the deadline to now.
	sock := s.conn.Conn()
	stopWatch := context.AfterFunc(ctx, func() { sock.SetReadDeadline(time.Now()) })
	defer stopWatch()
	var deadline time.Time
	for {
		s.c.streamLoop.Beat()
		if err := ctx.Err(); err != nil {
			return err
		}
		select {
		case err := <-s.c.relay.Err():
			return err
		default:
		}
		if time.Now().After(s.nextStatus) {
			if err := s.status(); err != nil {
				return err
			}
		}
		// Backpressure: with the in-flight bound reached, stop reading WAL
		// (the walsender blocks on the full socket) but keep sending status
		// so the server neither times us out nor loses confirmations.
		if s.tr.Inflight() >= max {
			t := time.NewTimer(time.Until(s.nextStatus))
			err := s.tr.WaitBelow(max, ctx.Done(), s.c.relay.Err(), t.C)
			t.Stop()
			if err != nil {
				return err
			}
			continue
		}
		if s.vis != nil && !s.held.empty() {
			if err := s.vis.failed(); err != nil {
				return err
			}
			// A new snapshot, or a replay that stopped at the in-flight
			// bound: stream what is visible now.
			if s.vis.snap.Load() != s.seen || s.replayMore {
				if err := s.replay(max); err != nil {
					return err
				}
				continue
			}
			// Wait for the next snapshot without reading on: what the
			// walsender sends meanwhile queues in the socket and is read
			// in one go once the snapshot is in (a read per message while
			// the query is out cost more than the query, and nothing behind
			// the held transaction could be produced anyway).
			if err := s.waitSnapshot(ctx); err != nil {
				return err
			}
			continue
		}
		if !deadline.Equal(s.nextStatus) {
			deadline = s.nextStatus
			sock.SetReadDeadline(deadline)
		}
		msg, err := s.conn.ReceiveMessage(context.Background())
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if pgconn.Timeout(err) {
				// Time for a status update, or a snapshot arrived: set the
				// deadline again either way.
				deadline = time.Time{}
				continue
			}
			return fmt.Errorf("capture: receive: %w", err)
		}
		switch msg := msg.(type) {
		case *pgproto3.CopyData:
			if err := s.copyData(msg.Data); err != nil {
				return err
			}
		case *pgproto3.ErrorResponse:
			return fmt.Errorf("capture: replication: %w", pgconn.ErrorResponseToPgError(msg))
		case *pgproto3.CopyDone:
			return errors.New("capture: server ended replication")
		}
	}
}

func (s *streamer) copyData(data []byte) error {
	if len(data) == 0 {
		return nil
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return fmt.Errorf("capture: keepalive: %w", err)
		}
		// Nothing open, held or in flight: every commit before the server's
		// WAL end has been sent and acked, so confirming it retains no WAL on an
		// idle catalog.
		if s.txn == nil && s.held.empty() {
			s.tr.AdvanceIdle(schema.LSN(ka.ServerWALEnd))
		}
		if ka.ReplyRequested {
			return s.status()
		}
	case pglogrepl.XLogDataByteID:
		xld, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return fmt.Errorf("capture: xlogdata: %w", err)
		}
		return s.route(xld.WALData)
	}
	return nil
}

// wal decodes one pgoutput message and hands its records to the relay.
func (s *streamer) wal(data []byte) error {
	if s.fastRow(data) {
		return nil
	}
	m, err := pglogrepl.Parse(data)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrDecode, err)
	}
	switch m := m.(type) {
	case *pglogrepl.BeginMessage:
		// route held it until a snapshot showed it ended.
		s.txn = s.tr.Begin()
		s.commitLSN, s.commitTime, s.xid = schema.LSN(m.FinalLSN), m.CommitTime, m.Xid
		s.beat = time.Time{}
	case *pglogrepl.CommitMessage:
		if s.txn == nil {
			return fmt.Errorf("%w: COMMIT without BEGIN", ErrDecode)
		}
		if !s.beat.IsZero() {
			s.resolved(s.txn, s.beat, s.commitLSN)
		}
		s.tr.Close(s.txn, schema.LSN(m.TransactionEndLSN))
		s.txn = nil
		s.c.m.transactions.Inc()
	case *pglogrepl.RelationMessage:
		s.dec.relation(m)
	case *pglogrepl.InsertMessage:
		return s.row(m.RelationID, m.Tuple)
	case *pglogrepl.UpdateMessage:
		if m.OldTuple != nil {
			// An old tuple comes with a changed key (or REPLICA IDENTITY
			// FULL): if the key moved, the old key's row is gone, like a
			// hard delete.
			if r, err := s.dec.rel(m.RelationID); err == nil && r.kind == relItems {
				old, cur := s.change(), s.change()
				if err := s.dec.deleted(r, m.OldTuple, old); err != nil {
					if err := s.undecodable(old, err); err != nil {
						return err
					}
				} else if err := s.dec.row(r, m.NewTuple, cur); err != nil || old.Tenant != cur.Tenant || old.Item != cur.Item {
					s.produceChange(old) // the new row is judged below
				}
			}
		}
		return s.row(m.RelationID, m.NewTuple)
	case *pglogrepl.DeleteMessage:
		r, err := s.dec.rel(m.RelationID)
		if err != nil || r.kind != relItems {
			return err
		}
		ch := s.change()
		if err := s.dec.deleted(r, m.OldTuple, ch); err != nil {
			return s.undecodable(ch, err)
		}
		s.produceChange(ch)
	case *pglogrepl.TruncateMessage:
		for _, id := range m.RelationIDs {
			if r, err := s.dec.rel(id); err == nil && r.kind == relItems {
				ch := s.change()
				ch.Op = schema.OpTruncate
				s.produceChange(ch)
				break
			}
		}
	case *pglogrepl.LogicalDecodingMessage:
		if m.Prefix != heartbeatPrefix || m.Transactional {
			return nil
		}
		at, err := messageTime(m.Content)
		if err != nil {
			// Any role allowed to emit a logical message can write this
			// prefix: a message capture did not write is skipped, never a
			// reason to stop (a restart would stop on it again).
			s.skipBeat(err)
			return nil
		}
		if s.txn != nil { // not expected with proto 1; keep it behind the open transaction
			s.beat = at
			return nil
		}
		x := s.tr.Begin()
		s.resolved(x, at, schema.LSN(m.LSN))
		s.tr.Close(x, schema.LSN(m.LSN))
	}
	return nil
}

// skipBeat counts a heartbeat that carries no time and warns, at most once
// a minute (a role emitting such messages in a loop must not flood the log).
func (s *streamer) skipBeat(err error) {
	s.c.m.beatSkipped.Inc()
	if now := time.Now(); now.Sub(s.lastSkipLog) >= time.Minute {
		s.lastSkipLog = now
		s.c.log.Warn("skipped a heartbeat capture did not write; the watermark waits for the next one", "err", err)
	}
}

func (s *streamer) change() *schema.Change {
	return &schema.Change{LSN: s.commitLSN, CommitTime: s.commitTime, Xid: s.xid}
}

func (s *streamer) row(relID uint32, t *pglogrepl.TupleData) error {
	r, err := s.dec.rel(relID)
	if err != nil {
		return err
	}
	switch r.kind {
	case relItems:
		if s.txn == nil {
			return fmt.Errorf("%w: row outside a transaction", ErrDecode)
		}
		ch := s.change()
		if err := s.dec.row(r, t, ch); err != nil {
			return s.undecodable(ch, err)
		}
		s.produceChange(ch)
	case relHeartbeat:
		at, err := beatTime(r, t)
		if err != nil {
			s.skipBeat(err) // as for a heartbeat message: not capture's write
			return nil
		}
		s.beat = at
	}
	return nil
}

func (s *streamer) produceChange(ch *schema.Change) {
	v := schema.Encode(ch)
	switch ch.Op {
	case schema.OpUpsert:
		s.upserts.Inc()
	case schema.OpDelete:
		s.deletes.Inc()
	case schema.OpTruncate:
		s.truncates.Inc()
		for p := range s.fanout() {
			s.c.relay.Produce(s.tr, s.txn, schema.MarkerKey(int32(p)), int32(p), v, ch.CommitTime)
		}
		return
	}
	if s.c.tracer == nil {
		s.c.relay.Produce(s.tr, s.txn, ch.Key(), 0, v, ch.CommitTime)
		return
	}
	// A sampled change's trace starts here: the change as the WAL gave it,
	// then its record on its way to Kafka (the relay's child span).
	ctx, span := s.c.tracer.Start(context.Background(), "capture.change", trace.WithSpanKind(trace.SpanKindInternal))
	if span.IsRecording() {
		span.SetAttributes(attribute.String("tidemark.tenant", ch.Tenant), attribute.String("tidemark.item_id", ch.Item),
			attribute.Int64("tidemark.version", ch.Version), attribute.String("tidemark.op", string(ch.Op)),
			attribute.String("tidemark.lsn", ch.LSN.String()), attribute.Int64("tidemark.xid", int64(ch.Xid)),
			attribute.String("tidemark.commit_time", ch.CommitTime.UTC().Format(time.RFC3339Nano)))
	}
	s.c.relay.ProduceTraced(ctx, s.tr, s.txn, ch.Key(), 0, v, ch.CommitTime)
	span.End()
}

// fanout is how many partitions a marker goes to: the count the session
// started with, or more once the producer has placed a record with more
// (the topic grew). Every record sent before the marker went to a
// partition below it, so the marker covers them all; it carries the count,
// and the applier raises the watermark's partition count to it first.
func (s *streamer) fanout() int {
	routed, err := s.c.relay.Placed(s.ctx)
	if err != nil && !s.unsure {
		// The session ends with records whose partition is not known yet:
		// this marker may not cover them, so nothing more is confirmed
		// (status) and the next session sends them again.
		s.unsure = true
		s.c.log.Warn("session ending before every record was placed on a partition: confirming nothing more", "err", err)
	}
	n := max(s.partitions, routed)
	if n > s.grown {
		if s.grown > 0 && n > s.partitions {
			s.c.log.Info("the topic grew: markers go to every partition", "partitions", n)
		}
		s.grown = n
	}
	return n
}

// resolved sends a resolved marker to every partition, behind every record
// produced before it (the producer keeps per-partition order).
func (s *streamer) resolved(x *relay.Txn, beat time.Time, lsn schema.LSN) {
	n := s.fanout()
	v := schema.Encode(&schema.Resolved{ResolvedTime: beat.Add(-s.c.cfg.HeartbeatMargin), LSN: lsn, Partitions: int32(n), Source: s.source})
	for p := range n {
		s.c.relay.Produce(s.tr, x, schema.MarkerKey(int32(p)), int32(p), v, time.Time{})
	}
	s.c.m.heartbeats.Inc()
}

// status confirms the newest LSN Kafka holds everything before
// (write = flush = apply).
func (s *streamer) status() error {
	lsn := s.tr.Confirmable()
	if s.unsure {
		lsn = s.sent
	}
	s.nextStatus = time.Now().Add(s.c.cfg.StatusInterval)
	// The gauge moves before the send: once Postgres shows the position,
	// a scrape must not still show an older one.
	if lsn != s.sent {
		s.c.m.confirmed.Set(float64(lsn))
	}
	err := pglogrepl.SendStandbyStatusUpdate(context.Background(), s.conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: pglogrepl.LSN(lsn), WALFlushPosition: pglogrepl.LSN(lsn), WALApplyPosition: pglogrepl.LSN(lsn),
	})
	if err != nil {
		return fmt.Errorf("capture: send standby status: %w", err)
	}
	s.sent = lsn
	return nil
}

// finish confirms what Kafka acked and ends the copy so the server has
// processed the confirmation before the connection closes.
func (s *streamer) finish(ctx context.Context) {
	if s.conn.IsClosed() {
		return
	}
	s.conn.Conn().SetDeadline(time.Now().Add(5 * time.Second)) // shutdown moved it to the past
	if err := s.status(); err != nil {
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = pglogrepl.SendStandbyCopyDone(ctx, s.conn) // ending: the wait below bounds it, the final position is logged
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
	s.c.log.Info("confirmed final position", "lsn", s.sent)
}
