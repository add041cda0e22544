package capture

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/tidemark/tidemark/schema"
)

// ErrDecode marks WAL that cannot be turned into events. A malformed
// message stops capture rather than skip a change; a captured row that
// cannot become an event (a NULL version, a NULL key) is turned into the
// safe action instead (undecodable.go), so no row stops the stream.
var ErrDecode = errors.New("capture: decode")

// relKind says what a relation is to capture.
type relKind int

const (
	relOther relKind = iota
	relItems
	relHeartbeat
)

// relation is what capture needs from a pgoutput Relation message: which
// tuple positions hold the configured columns.
type relation struct {
	kind                         relKind
	name                         string
	tenant, item, version, state int // column positions, -1 if absent
	beatAt                       int
	tenantCol, itemCol           string // the key's column names: neither may be empty
}

// decoder turns pgoutput row messages into schema changes. Relation messages
// precede the first row of a relation in each session, and again after the
// table changed, so the map is complete for every row that follows.
type decoder struct {
	cfg       Config
	relations map[uint32]*relation
}

func newDecoder(cfg Config) *decoder {
	return &decoder{cfg: cfg, relations: map[uint32]*relation{}}
}

func (d *decoder) relation(m *pglogrepl.RelationMessage) {
	name := m.Namespace + "." + m.RelationName
	r := &relation{name: name, tenant: -1, item: -1, version: -1, state: -1, beatAt: -1,
		tenantCol: d.cfg.TenantColumn, itemCol: d.cfg.ItemColumn}
	switch name {
	case d.cfg.Table:
		r.kind = relItems
	case d.cfg.HeartbeatTable:
		r.kind = relHeartbeat
	}
	for i, c := range m.Columns {
		switch c.Name {
		case d.cfg.TenantColumn:
			r.tenant = i
		case d.cfg.ItemColumn:
			r.item = i
		case d.cfg.VersionColumn:
			r.version = i
		case "beat_at":
			r.beatAt = i
		}
		if d.cfg.StateColumn != "" && c.Name == d.cfg.StateColumn {
			r.state = i
		}
	}
	d.relations[m.RelationID] = r
}

func (d *decoder) rel(id uint32) (*relation, error) {
	r, ok := d.relations[id]
	if !ok {
		return nil, fmt.Errorf("%w: row for relation %d before its Relation message", ErrDecode, id)
	}
	return r, nil
}

// row decodes an inserted or updated row of the captured table.
func (d *decoder) row(r *relation, t *pglogrepl.TupleData, c *schema.Change) error {
	var err error
	if c.Tenant, err = text(r, t, r.tenant, d.cfg.TenantColumn); err != nil {
		return err
	}
	if c.Item, err = text(r, t, r.item, d.cfg.ItemColumn); err != nil {
		return err
	}
	v, err := text(r, t, r.version, d.cfg.VersionColumn)
	if err != nil {
		return err
	}
	if c.Version, err = strconv.ParseInt(v, 10, 64); err != nil {
		return fmt.Errorf("%w: %s.%s = %q is not an integer", ErrDecode, r.name, d.cfg.VersionColumn, v)
	}
	if c.Version <= 0 {
		// Versions start at 1 (a hard delete's event carries 0): a zero or
		// negative one orders below every floor.
		return fmt.Errorf("%w: %s.%s = %d is not above 0", ErrDecode, r.name, d.cfg.VersionColumn, c.Version)
	}
	c.Op = schema.OpUpsert
	if r.state >= 0 && r.state < len(t.Columns) && t.Columns[r.state].DataType == pglogrepl.TupleDataTypeText &&
		string(t.Columns[r.state].Data) == d.cfg.DeletedState {
		c.Op = schema.OpDelete // a tombstone keeps its new version
	}
	return nil
}

// deleted decodes a hard DELETE: only the key columns are known, so the
// version is 0 and readers purge the key.
func (d *decoder) deleted(r *relation, t *pglogrepl.TupleData, c *schema.Change) error {
	var err error
	if t == nil {
		return fmt.Errorf("%w: DELETE on %s without old key: the table needs a primary key or REPLICA IDENTITY", ErrDecode, r.name)
	}
	if c.Tenant, err = text(r, t, r.tenant, d.cfg.TenantColumn); err != nil {
		return fmt.Errorf("%w (the replica identity of %s must include the tenant and item columns)", err, r.name)
	}
	if c.Item, err = text(r, t, r.item, d.cfg.ItemColumn); err != nil {
		return fmt.Errorf("%w (the replica identity of %s must include the tenant and item columns)", err, r.name)
	}
	c.Version, c.Op = 0, schema.OpDelete
	return nil
}

func text(r *relation, t *pglogrepl.TupleData, i int, col string) (string, error) {
	if i < 0 {
		return "", fmt.Errorf("%w: %s has no column %s in the publication", ErrDecode, r.name, col)
	}
	if i >= len(t.Columns) || t.Columns[i].DataType != pglogrepl.TupleDataTypeText {
		return "", fmt.Errorf("%w: %s.%s is NULL or unchanged-TOAST in a change", ErrDecode, r.name, col)
	}
	if len(t.Columns[i].Data) == 0 && (col == r.tenantCol || col == r.itemCol) {
		return "", fmt.Errorf("%w: %s.%s is empty in a change", ErrDecode, r.name, col)
	}
	return string(t.Columns[i].Data), nil
}

// beatTime reads beat_at from a heartbeat-row update.
func beatTime(r *relation, t *pglogrepl.TupleData) (time.Time, error) {
	s, err := text(r, t, r.beatAt, "beat_at")
	if err != nil {
		return time.Time{}, err
	}
	return parseTimestamptz(s)
}

// parseTimestamptz parses Postgres' ISO output ("2026-01-02 03:04:05.123456+00",
// offsets may carry minutes).
func parseTimestamptz(s string) (time.Time, error) {
	for _, layout := range []string{"2006-01-02 15:04:05.999999Z07", "2006-01-02 15:04:05.999999Z07:00", "2006-01-02 15:04:05.999999Z07:00:00"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%w: heartbeat time %q is not an ISO timestamptz", ErrDecode, s)
}

// messageTime reads a heartbeat logical message: the server clock in unix
// microseconds.
func messageTime(content []byte) (time.Time, error) {
	us, err := strconv.ParseInt(strings.TrimSpace(string(content)), 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: heartbeat message %q is not unix microseconds", ErrDecode, content)
	}
	return time.UnixMicro(us), nil
}
