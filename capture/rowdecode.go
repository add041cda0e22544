package capture

import (
	"encoding/binary"

	"github.com/tidemark/tidemark/schema"
)

// fastRow decodes the hot path — an INSERT or a key-preserving UPDATE of
// the captured table — straight from the pgoutput bytes, without
// pglogrepl's per-column allocations. It reports false for anything else
// (other relations, old-key tuples, NULLs, malformed input), which then
// takes the general path with its precise errors.
//
//	Insert: 'I' relid:int32 'N' tuple
//	Update: 'U' relid:int32 'N' tuple   (an old 'K'/'O' tuple goes the general way)
//	tuple:  ncols:int16 { kind:byte ('n'|'u'|'t'|'b') [len:int32 bytes] }
func (s *streamer) fastRow(data []byte) bool {
	if s.txn == nil {
		return false
	}
	ch := s.change()
	if !s.dec.fastRow(data, ch) {
		return false
	}
	s.produceChange(ch)
	return true
}

// fastRow fills c's tenant, item, version and op from an Insert or Update
// message exactly as pglogrepl.Parse followed by row would, or reports false
// and leaves c alone (capture/rowdecode_test.go holds it to that).
func (d *decoder) fastRow(data []byte, c *schema.Change) bool {
	if len(data) < 8 || (data[0] != 'I' && data[0] != 'U') || data[5] != 'N' {
		return false
	}
	r, ok := d.relations[binary.BigEndian.Uint32(data[1:5])]
	if !ok || r.kind != relItems || r.tenant < 0 || r.item < 0 || r.version < 0 {
		return false
	}
	b := data[6:]
	if len(b) < 2 {
		return false
	}
	n := int(binary.BigEndian.Uint16(b))
	b = b[2:]
	var tenant, item, version, state []byte
	stateSet := false
	for i := 0; i < n; i++ {
		if len(b) < 1 {
			return false
		}
		kind := b[0]
		b = b[1:]
		var v []byte
		switch kind {
		case 't':
			if len(b) < 4 {
				return false
			}
			l := int(binary.BigEndian.Uint32(b))
			if len(b) < 4+l {
				return false
			}
			v, b = b[4:4+l], b[4+l:]
		case 'n', 'u':
		default:
			return false // binary format is never requested
		}
		switch i {
		case r.tenant:
			tenant = v
		case r.item:
			item = v
		case r.version:
			version = v
		case r.state:
			state, stateSet = v, kind == 't'
		}
	}
	if tenant == nil || item == nil || len(version) == 0 {
		return false
	}
	var ver int64
	for _, c := range version {
		if c < '0' || c > '9' || ver > (1<<63-1-9)/10 {
			return false // negative or huge: let the general path judge
		}
		ver = ver*10 + int64(c-'0')
	}
	if ver == 0 || len(tenant) == 0 || len(item) == 0 {
		return false // not an item's change: the general path reports it
	}
	c.Tenant, c.Item, c.Version, c.Op = string(tenant), string(item), ver, schema.OpUpsert
	if stateSet && string(state) == d.cfg.DeletedState {
		c.Op = schema.OpDelete
	}
	return true
}
