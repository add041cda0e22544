package relay

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/tidemark/schema"
)

// murmur2 is Java's Utils.murmur2, written here independently of franz-go so
// that the partitioner test does not trust the library it checks.
func murmur2(b []byte) uint32 {
	const seed, m = uint32(0x9747b28c), uint32(0x5bd1e995)
	h := seed ^ uint32(len(b))
	for ; len(b) >= 4; b = b[4:] {
		k := uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
		k *= m
		k ^= k >> 24
		k *= m
		h = h*m ^ k
	}
	switch len(b) {
	case 3:
		h ^= uint32(b[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(b[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(b[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return h
}

// The test's murmur2 must be Java's Utils.murmur2 (vectors from Kafka's
// UtilsTest), so the partitioner check below is independent of franz-go.
func TestMurmur2MatchesJava(t *testing.T) {
	for s, want := range map[string]int32{
		"21":                         -973932308,
		"foobar":                     -790332482,
		"a-little-bit-long-string":   -985981536,
		"a-little-bit-longer-string": -1486304829,
		"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
		"abc": 479470107,
	} {
		if got := int32(murmur2([]byte(s))); got != want {
			t.Errorf("murmur2(%q) = %d, want %d", s, got, want)
		}
	}
}

// The partitioner places item keys as the Java client does (murmur2, sign
// bit masked, mod n) and markers on the partition they name.
func TestPartitionerMatchesJavaClient(t *testing.T) {
	p := Partitioner().ForTopic("t")
	for i := range 1000 {
		key := schema.Key(fmt.Sprintf("tenant-%d", i%7), fmt.Sprintf("item/%d", i))
		want := int32(int(murmur2([]byte(key))&0x7fffffff) % 12)
		if got := p.Partition(&kgo.Record{Key: []byte(key)}, 12); int32(got) != want {
			t.Fatalf("partition(%q) = %d, want %d", key, got, want)
		}
	}
	if got := p.Partition(&kgo.Record{Key: []byte(schema.MarkerKey(5)), Partition: 5}, 12); got != 5 {
		t.Fatalf("marker went to partition %d, want 5", got)
	}
}
