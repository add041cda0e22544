package schema

import (
	"bytes"
	"strconv"
	"time"
	"unicode/utf8"
)

// fastChange decodes a change record in the exact canonical form Encode
// writes (what the relay produces) without encoding/json: replay is
// CPU-bound on it otherwise. Anything else — other events, escaped strings,
// reordered or extra fields — reports false and goes through decodeJSON, so
// Decode's result never depends on which path ran (decode_fast_test.go).

// cursor walks b, failing closed: any mismatch sets bad.
type cursor struct {
	b   []byte
	bad bool
}

func (c *cursor) lit(s string) {
	if c.bad || !bytes.HasPrefix(c.b, []byte(s)) {
		c.bad = true
		return
	}
	c.b = c.b[len(s):]
}

// str reads a string body up to the closing quote; escapes, control bytes
// and invalid UTF-8 are left to the real decoder.
func (c *cursor) str() string {
	if c.bad {
		return ""
	}
	i := bytes.IndexByte(c.b, '"')
	if i < 0 {
		c.bad = true
		return ""
	}
	s := c.b[:i]
	for _, ch := range s {
		if ch < 0x20 || ch == '\\' {
			c.bad = true
			return ""
		}
	}
	if !utf8.Valid(s) {
		c.bad = true
		return ""
	}
	c.b = c.b[i+1:]
	return string(s)
}

// num reads a non-negative decimal without leading zeros.
func (c *cursor) num(bits int) uint64 {
	if c.bad {
		return 0
	}
	i := 0
	for i < len(c.b) && c.b[i] >= '0' && c.b[i] <= '9' {
		i++
	}
	if i == 0 || i > 1 && c.b[0] == '0' {
		c.bad = true
		return 0
	}
	n, err := strconv.ParseUint(string(c.b[:i]), 10, bits)
	if err != nil {
		c.bad = true
		return 0
	}
	c.b = c.b[i:]
	return n
}

func fastChange(b []byte) (*Change, bool) {
	c := cursor{b: b}
	c.lit(`{"schema":1,"type":"change","tenant":"`)
	tenant := c.str()
	c.lit(`,"item":"`)
	item := c.str()
	c.lit(`,"version":`)
	version := c.num(63)
	c.lit(`,"op":"`)
	op := Op(c.str())
	c.lit(`,"lsn":"`)
	lsnStr := c.str()
	c.lit(`,"commit_time":"`)
	ts := c.str()
	c.lit(`,"xid":`)
	xid := c.num(32)
	c.lit(`}`)
	if c.bad || len(c.b) != 0 {
		return nil, false
	}
	if op != OpUpsert && op != OpDelete || tenant == "" || item == "" {
		return nil, false // truncate and the rest: rare, the real decoder
	}
	lsn, err := ParseLSN(lsnStr)
	if err != nil {
		return nil, false
	}
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return nil, false
	}
	return &Change{Tenant: tenant, Item: item, Version: int64(version), Op: op, LSN: lsn,
		CommitTime: t.UTC(), Xid: uint32(xid)}, true
}
