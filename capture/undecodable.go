package capture

import (
	"errors"
	"strconv"

	"github.com/tidemark/tidemark/schema"
)

// ReasonUndecodableRow is the reset reason of a captured row whose key could
// not be read (NULL, unchanged-TOAST or empty tenant or item).
const ReasonUndecodableRow = "undecodable_row"

// Actions taken for an undecodable row, the label of
// tidemark_capture_undecodable_rows_total.
const (
	actionPurge = "purge" // the key was read: its cached value is dropped
	actionReset = "reset" // the key was not: reset_at moves on every partition
)

// undecodable turns a change of the captured table that cannot become an
// event (a NULL, non-integer, zero or negative version; a NULL,
// unchanged-TOAST or empty key column) into the safe action, so that no row
// can stop the stream (a restart would stop on it again, and the slot would
// keep WAL for ever): ch's key, when it was read, gets a hard-delete event
// (version 0: appliers purge the key, and the next reader reads the source);
// otherwise a reset marker with the commit time goes to every partition, so
// no entry observed before the change is extended by the watermark. Both
// travel in the transaction like its other records, so they are confirmed
// with it, and capture streams on.
func (s *streamer) undecodable(ch *schema.Change, cause error) error {
	if !errors.Is(cause, ErrDecode) {
		cause = errors.Join(ErrDecode, cause)
	}
	if stopOnBadRow {
		return cause
	}
	if ch.Tenant != "" && ch.Item != "" {
		s.c.m.undecodable.WithLabelValues(actionPurge).Inc()
		s.c.log.Error("undecodable change of a captured row: its key is purged from the cache instead (the row needs fixing)",
			"lsn", ch.LSN, "xid", ch.Xid, "key", strconv.Quote(ch.Key()), "err", cause)
		ch.Version, ch.Op = 0, schema.OpDelete
		s.c.relay.Produce(s.tr, s.txn, ch.Key(), 0, schema.Encode(ch), ch.CommitTime)
		return nil
	}
	s.c.m.undecodable.WithLabelValues(actionReset).Inc()
	s.c.m.resets.WithLabelValues(ReasonUndecodableRow).Inc()
	s.c.log.Error("undecodable change of a captured row whose key cannot be read: a reset marker goes to every partition instead (the row needs fixing)",
		"lsn", ch.LSN, "xid", ch.Xid, "key", strconv.Quote(ch.Tenant+"/"+ch.Item), "err", cause)
	v := schema.Encode(&schema.Reset{ResetTime: ch.CommitTime, Reason: ReasonUndecodableRow})
	for p := range s.fanout() {
		s.c.relay.Produce(s.tr, s.txn, schema.MarkerKey(int32(p)), int32(p), v, ch.CommitTime)
	}
	return nil
}

// stopOnBadRow is set only by the build tag tidemark_stop_on_bad_row
// (stop_on_bad_row.go): capture as it was, stopping on an undecodable row,
// for the chaos harness's test of the fault bad-version-row.
var stopOnBadRow = false
