package capture

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/jackc/pglogrepl"

	"github.com/tidemark/tidemark/schema"
)

// The fast row decoder fills exactly what pglogrepl.Parse followed by the
// general decoder would, whenever it accepts a message, and accepts plain
// inserts and key-preserving updates of the captured table.
func TestFastRowMatchesGeneralDecoder(t *testing.T) {
	cfg := DefaultConfig()
	d := newDecoder(cfg)
	const itemsRel, beatRel = 16384, 16390
	cols := func(names ...string) []*pglogrepl.RelationMessageColumn {
		var out []*pglogrepl.RelationMessageColumn
		for _, n := range names {
			out = append(out, &pglogrepl.RelationMessageColumn{Name: n})
		}
		return out
	}
	tbl := func(full string) (string, string) {
		for i := range full {
			if full[i] == '.' {
				return full[:i], full[i+1:]
			}
		}
		return "public", full
	}
	ns, name := tbl(cfg.Table)
	// Column order differs from the config's on purpose; "display" is extra.
	d.relation(&pglogrepl.RelationMessage{RelationID: itemsRel, Namespace: ns, RelationName: name,
		Columns: cols("display", cfg.VersionColumn, cfg.ItemColumn, cfg.StateColumn, cfg.TenantColumn)})
	hns, hname := tbl(cfg.HeartbeatTable)
	d.relation(&pglogrepl.RelationMessage{RelationID: beatRel, Namespace: hns, RelationName: hname, Columns: cols("id", "beat_at")})

	rng := rand.New(rand.NewPCG(3, 4))
	texts := []string{"", "t1", "acme", "item-1", "é/ü", "a\x00b", "42", "0", "007", "-1", "9223372036854775807",
		"9223372036854775808", "99999999999999999999", "4a", "+5", " 5", cfg.DeletedState, "active"}
	tuple := func(n int) []byte {
		b := binary.BigEndian.AppendUint16(nil, uint16(n))
		for range n {
			switch k := rng.IntN(20); {
			case k == 0:
				b = append(b, 'n')
			case k == 1:
				b = append(b, 'u')
			case k == 2:
				v := texts[rng.IntN(len(texts))]
				b = append(b, 'b')
				b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
				b = append(b, v...)
			default:
				v := texts[rng.IntN(len(texts))]
				if rng.IntN(4) != 0 {
					v = []string{"t1", "acme", "item-1", "17", "3"}[rng.IntN(5)]
				}
				b = append(b, 't')
				b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
				b = append(b, v...)
			}
		}
		return b
	}
	accepted := 0
	for i := 0; i < 20000; i++ {
		msg := []byte{"IU"[rng.IntN(2)]}
		rel := []uint32{itemsRel, itemsRel, itemsRel, beatRel, 999}[rng.IntN(5)]
		msg = binary.BigEndian.AppendUint32(msg, rel)
		if msg[0] == 'U' && rng.IntN(5) == 0 {
			msg = append(msg, "KO"[rng.IntN(2)])
			msg = append(msg, tuple(5)...)
		}
		msg = append(msg, 'N')
		msg = append(msg, tuple([]int{5, 5, 5, 4, 6, 0}[rng.IntN(6)])...)
		if rng.IntN(10) == 0 { // a message kind or tuple marker that is not ours
			msg[[]int{0, 5}[rng.IntN(2)]] = "IUDKONTtbnu"[rng.IntN(11)]
		}
		if rng.IntN(20) == 0 {
			msg = msg[:rng.IntN(len(msg))]
		}

		var fast schema.Change
		ok := d.fastRow(msg, &fast)
		want, werr := general(d, msg)
		if !ok {
			if fast != (schema.Change{}) {
				t.Fatalf("message %q: fast path refused but changed the event: %+v", msg, fast)
			}
			continue
		}
		accepted++
		if werr != nil || want == nil || fast != *want {
			t.Fatalf("message %q: fast %+v, general %+v / %v", msg, fast, want, werr)
		}
	}
	if accepted < 1000 {
		t.Fatalf("fast path accepted only %d messages", accepted)
	}
}

// general is the slow path of streamer.wal for one row message of the
// captured table: nil without error for anything that is not one.
func general(d *decoder, msg []byte) (c *schema.Change, err error) {
	defer func() {
		if p := recover(); p != nil { // pglogrepl indexes past the end of truncated tuples
			c, err = nil, fmt.Errorf("pglogrepl.Parse panicked: %v", p)
		}
	}()
	m, err := pglogrepl.Parse(msg)
	if err != nil {
		return nil, err
	}
	var relID uint32
	var tup *pglogrepl.TupleData
	switch m := m.(type) {
	case *pglogrepl.InsertMessage:
		relID, tup = m.RelationID, m.Tuple
	case *pglogrepl.UpdateMessage:
		if m.OldTuple != nil {
			return nil, nil
		}
		relID, tup = m.RelationID, m.NewTuple
	default:
		return nil, nil
	}
	r, err := d.rel(relID)
	if err != nil || r.kind != relItems {
		return nil, err
	}
	c = new(schema.Change)
	if err := d.row(r, tup, c); err != nil {
		return nil, err
	}
	return c, nil
}
