package schema

import (
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

// The fast path returns exactly what decodeJSON returns whenever it
// accepts an input, and accepts the canonical encoding of plain changes.
func TestFastDecodeMatchesSchemaDecode(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "b", "c", "x", "1", "_", "~", "a", "Z", "9", "-", "/", " ", "é", "\"", "\\", "<", "\x01", "\u2028", "{", "}"}
	randStr := func() string {
		s := ""
		for n := rng.IntN(6); n >= 0; n-- {
			s += alphabet[rng.IntN(len(alphabet))]
		}
		return s
	}
	ops := []Op{OpUpsert, OpDelete, OpTruncate}
	accepted := 0
	for i := 0; i < 20000; i++ {
		c := &Change{Tenant: randStr(), Item: randStr(), Version: rng.Int64N(1 << 40), Op: ops[rng.IntN(3)],
			LSN: LSN(rng.Uint64()), CommitTime: time.Unix(0, rng.Int64N(1<<62)).Truncate(time.Microsecond), Xid: rng.Uint32()}
		b := Encode(c)
		if rng.IntN(3) == 0 { // mutate a byte
			b[rng.IntN(len(b))] = "0a\"\\{},:x1 "[rng.IntN(11)]
		}
		want, werr := decodeJSON(b)
		got, ok := fastChange(b)
		if !ok {
			continue
		}
		accepted++
		if werr != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("input %q: fast %+v, Decode %+v / %v", b, got, want, werr)
		}
	}
	if accepted < 1000 {
		t.Fatalf("fast path accepted only %d inputs", accepted)
	}
	plain := Encode(&Change{Tenant: "t1", Item: "item-1", Version: 7, Op: OpUpsert, LSN: 5, CommitTime: time.Now(), Xid: 3})
	if _, ok := fastChange(plain); !ok {
		t.Fatalf("canonical change %q not on the fast path", plain)
	}
}

func BenchmarkDecode(b *testing.B) {
	v := Encode(&Change{Tenant: "bench", Item: "item-12345", Version: 77, Op: OpUpsert, LSN: 99, CommitTime: time.Now(), Xid: 1})
	b.Run("fast", func(b *testing.B) {
		for b.Loop() {
			_, _ = Decode(v)
		}
	})
	b.Run("schema", func(b *testing.B) {
		for b.Loop() {
			_, _ = decodeJSON(v)
		}
	})
}
