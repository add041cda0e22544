package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Version is the major version of the event format written by this code.
const Version = 1

// Type names an event kind in the "type" field.
type Type string

const (
	TypeChange   Type = "change"
	TypeResolved Type = "resolved"
	TypeReset    Type = "reset"
)

// Op is what happened to an item.
type Op string

const (
	OpUpsert   Op = "upsert"
	OpDelete   Op = "delete"
	OpTruncate Op = "truncate"
)

// TimeLayout is RFC 3339 in UTC with exactly microseconds, Postgres' precision.
const TimeLayout = "2006-01-02T15:04:05.000000Z07:00"

// ErrMalformed reports a value that is not a valid event.
var ErrMalformed = errors.New("schema: malformed event")

// UnsupportedVersionError reports an event written in a major version this
// reader does not understand. Readers must not guess at its meaning.
type UnsupportedVersionError struct{ Version int }

func (e *UnsupportedVersionError) Error() string {
	return fmt.Sprintf("schema: unsupported event schema version %d (this reader understands %d)", e.Version, Version)
}

// Event is one of *Change, *Resolved or *Reset.
type Event interface {
	Type() Type
	// AppendJSON appends the canonical JSON encoding of the event.
	AppendJSON(dst []byte) []byte
}

// Change is one committed change to one item.
//
// Op delete with Version 0 is a hard delete whose last version is unknown
// (the row is gone): readers purge the key. Op truncate has an empty Tenant
// and Item, is keyed by MarkerKey and is sent to every partition.
type Change struct {
	Tenant     string
	Item       string
	Version    int64
	Op         Op
	LSN        LSN // commit LSN of the transaction
	CommitTime time.Time
	Xid        uint32
}

// Resolved promises that every change committed at or before ResolvedTime
// has already been written to the partition carrying the marker.
type Resolved struct {
	ResolvedTime time.Time
	LSN          LSN
	// Partitions is the topic's partition count the marker was fanned out
	// to (0: not said, from a capture before it was sent). Readers raise
	// the watermark's partition count to it before this partition's
	// watermark, so a partition the topic grew is part of W before any
	// marker after the growth can vouch for it.
	Partitions int32
	// Source names the stream the marker vouches for: the Postgres server
	// (system identifier), database and table capture reads ("": not
	// said, from a capture before it was sent; SourceName). Appliers hold
	// a partition whose markers come from two sources (two deployments on
	// one topic), and record each partition watermark's source beside it
	// (WatermarkSourceField), which a serve process compares with its own.
	Source string
}

// SourceName is a resolved marker's Source: the server's system
// identifier, the database and the table ("schema.table") capture reads.
func SourceName(systemID, database, table string) string {
	return SourceDatabase(systemID, database) + "/" + table
}

// SourceDatabase is the server-and-database part of SourceName: what a
// process that knows the database but not the table (tidemark status)
// compares a marker's source against, as a prefix.
func SourceDatabase(systemID, database string) string {
	return systemID + "/" + database
}

// Reset reports a gap: changes may have been lost before ResetTime, so no
// cached entry observed before it may be extended by the watermark.
type Reset struct {
	ResetTime time.Time
	Reason    string
}

func (*Change) Type() Type   { return TypeChange }
func (*Resolved) Type() Type { return TypeResolved }
func (*Reset) Type() Type    { return TypeReset }

// Key is the Kafka key of the change.
func (c *Change) Key() string { return Key(c.Tenant, c.Item) }

func (c *Change) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"schema":1,"type":"change","tenant":`...)
	dst = appendString(dst, c.Tenant)
	dst = append(dst, `,"item":`...)
	dst = appendString(dst, c.Item)
	dst = append(dst, `,"version":`...)
	dst = strconv.AppendInt(dst, c.Version, 10)
	dst = append(dst, `,"op":`...)
	dst = appendString(dst, string(c.Op))
	dst = append(dst, `,"lsn":"`...)
	dst = c.LSN.AppendText(dst)
	dst = append(dst, `","commit_time":"`...)
	dst = AppendTime(dst, c.CommitTime)
	dst = append(dst, `","xid":`...)
	dst = strconv.AppendUint(dst, uint64(c.Xid), 10)
	return append(dst, '}')
}

func (r *Resolved) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"schema":1,"type":"resolved","resolved_time":"`...)
	dst = AppendTime(dst, r.ResolvedTime)
	dst = append(dst, `","lsn":"`...)
	dst = r.LSN.AppendText(dst)
	dst = append(dst, '"')
	if r.Partitions > 0 {
		dst = append(dst, `,"partitions":`...)
		dst = strconv.AppendInt(dst, int64(r.Partitions), 10)
	}
	if r.Source != "" {
		dst = append(dst, `,"source":`...)
		dst = appendString(dst, r.Source)
	}
	return append(dst, '}')
}

func (r *Reset) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"schema":1,"type":"reset","reset_time":"`...)
	dst = AppendTime(dst, r.ResetTime)
	dst = append(dst, `","reason":`...)
	dst = appendString(dst, r.Reason)
	return append(dst, '}')
}

// Encode returns the canonical JSON encoding of e.
func Encode(e Event) []byte { return e.AppendJSON(make([]byte, 0, 192)) }

func appendString(dst []byte, s string) []byte {
	// Fast path for the common case: printable ASCII that json.Marshal
	// would write unchanged (it escapes quotes, backslashes, controls,
	// non-ASCII and, for HTML safety, < > &).
	plain := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			plain = false
			break
		}
	}
	if plain {
		dst = append(dst, '"')
		dst = append(dst, s...)
		return append(dst, '"')
	}
	b, _ := json.Marshal(s) // strings always marshal
	return append(dst, b...)
}

// wire is the union of all fields, for decoding.
type wire struct {
	Schema       *int    `json:"schema"`
	Type         Type    `json:"type"`
	Tenant       *string `json:"tenant"`
	Item         *string `json:"item"`
	Version      *int64  `json:"version"`
	Op           Op      `json:"op"`
	LSN          *string `json:"lsn"`
	CommitTime   *string `json:"commit_time"`
	Xid          *uint32 `json:"xid"`
	ResolvedTime *string `json:"resolved_time"`
	ResetTime    *string `json:"reset_time"`
	Reason       *string `json:"reason"`
	Partitions   *int32  `json:"partitions"`
	Source       *string `json:"source"`
}

// Decode parses an event value. Unknown fields are ignored (minor versions may
// add them); an unknown major version is an *UnsupportedVersionError; anything
// else that is not a valid event wraps ErrMalformed.
func Decode(b []byte) (Event, error) {
	if c, ok := fastChange(b); ok {
		return c, nil
	}
	return decodeJSON(b)
}

// decodeJSON is Decode for any input, through encoding/json.
func decodeJSON(b []byte) (Event, error) {
	var w wire
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&w); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: trailing data after the JSON object", ErrMalformed)
	}
	if w.Schema == nil {
		return nil, fmt.Errorf("%w: missing \"schema\"", ErrMalformed)
	}
	if *w.Schema != Version {
		return nil, &UnsupportedVersionError{Version: *w.Schema}
	}
	var missing []string
	need := func(name string, present bool) {
		if !present {
			missing = append(missing, name)
		}
	}
	var (
		ev  Event
		err error
	)
	switch w.Type {
	case TypeChange:
		// A truncate concerns the whole table: it has no tenant or item.
		whole := w.Op == OpTruncate
		need("tenant", w.Tenant != nil && (*w.Tenant != "" || whole))
		need("item", w.Item != nil && (*w.Item != "" || whole))
		need("version", w.Version != nil)
		need("op", w.Op != "")
		need("lsn", w.LSN != nil)
		need("commit_time", w.CommitTime != nil)
		need("xid", w.Xid != nil)
		if len(missing) > 0 {
			break
		}
		c := &Change{Tenant: *w.Tenant, Item: *w.Item, Version: *w.Version, Op: w.Op, Xid: *w.Xid}
		switch c.Op {
		case OpUpsert, OpDelete, OpTruncate:
		default:
			return nil, fmt.Errorf("%w: unknown op %q", ErrMalformed, c.Op)
		}
		if c.LSN, err = ParseLSN(*w.LSN); err != nil {
			return nil, err
		}
		if c.CommitTime, err = parseTime("commit_time", *w.CommitTime); err != nil {
			return nil, err
		}
		ev = c
	case TypeResolved:
		need("resolved_time", w.ResolvedTime != nil)
		need("lsn", w.LSN != nil)
		if len(missing) > 0 {
			break
		}
		r := &Resolved{}
		if r.ResolvedTime, err = parseTime("resolved_time", *w.ResolvedTime); err != nil {
			return nil, err
		}
		if r.LSN, err = ParseLSN(*w.LSN); err != nil {
			return nil, err
		}
		if w.Partitions != nil {
			if *w.Partitions < 1 {
				return nil, fmt.Errorf("%w: resolved partitions %d is not a partition count", ErrMalformed, *w.Partitions)
			}
			r.Partitions = *w.Partitions
		}
		if w.Source != nil {
			r.Source = *w.Source
		}
		ev = r
	case TypeReset:
		need("reset_time", w.ResetTime != nil)
		need("reason", w.Reason != nil)
		if len(missing) > 0 {
			break
		}
		r := &Reset{Reason: *w.Reason}
		if r.ResetTime, err = parseTime("reset_time", *w.ResetTime); err != nil {
			return nil, err
		}
		ev = r
	default:
		return nil, fmt.Errorf("%w: unknown type %q", ErrMalformed, w.Type)
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: %s event missing %s", ErrMalformed, w.Type, strings.Join(missing, ", "))
	}
	return ev, nil
}

func parseTime(field, s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: %s: %v", ErrMalformed, field, err)
	}
	return t.UTC(), nil
}

// LSN is a Postgres WAL position, written "X/X" in uppercase hex as Postgres does.
type LSN uint64

func (l LSN) String() string { return string(l.AppendText(make([]byte, 0, 17))) }

// AppendText appends l as String writes it, without allocating: capture
// formats one per change (strconv, ToUpper and the concatenation were five
// allocations and about 2 % of its CPU).
func (l LSN) AppendText(dst []byte) []byte {
	dst = appendHex(dst, uint32(l>>32))
	dst = append(dst, '/')
	return appendHex(dst, uint32(l))
}

func appendHex(dst []byte, v uint32) []byte {
	var b [8]byte
	i := len(b)
	for {
		i--
		b[i] = "0123456789ABCDEF"[v&0xF]
		if v >>= 4; v == 0 {
			break
		}
	}
	return append(dst, b[i:]...)
}

// AppendTime appends t in UTC as TimeLayout writes it
// (2026-12-01T19:40:01.123456Z, microseconds truncated), without
// interpreting the layout: capture formats one per change, and
// time.AppendFormat was about 4 % of its CPU. Years outside 0-9999 take
// AppendFormat.
func AppendTime(dst []byte, t time.Time) []byte {
	t = t.UTC()
	y, mo, d := t.Date()
	if y < 0 || y > 9999 {
		return t.AppendFormat(dst, TimeLayout)
	}
	h, mi, s := t.Clock()
	us := t.Nanosecond() / 1000
	dst = append(dst, byte('0'+y/1000), byte('0'+y/100%10), byte('0'+y/10%10), byte('0'+y%10), '-',
		byte('0'+int(mo)/10), byte('0'+int(mo)%10), '-', byte('0'+d/10), byte('0'+d%10), 'T',
		byte('0'+h/10), byte('0'+h%10), ':', byte('0'+mi/10), byte('0'+mi%10), ':', byte('0'+s/10), byte('0'+s%10), '.')
	for div := 100000; div > 0; div /= 10 {
		dst = append(dst, byte('0'+us/div%10))
	}
	return append(dst, 'Z')
}

// ParseLSN parses "X/X" (either case, as Postgres accepts).
func ParseLSN(s string) (LSN, error) {
	hi, lo, ok := strings.Cut(s, "/")
	if !ok || hi == "" || lo == "" || len(hi) > 8 || len(lo) > 8 {
		return 0, fmt.Errorf("%w: bad lsn %q", ErrMalformed, s)
	}
	h, err1 := strconv.ParseUint(hi, 16, 32)
	l, err2 := strconv.ParseUint(lo, 16, 32)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("%w: bad lsn %q", ErrMalformed, s)
	}
	return LSN(h<<32 | l), nil
}
