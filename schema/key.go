// Package schema is tidemark's wire contract: the events carried on the Kafka
// topic, how their keys are built, and how the cache tier names its Redis keys.
// Everything here is shared by writers and readers in any language, so it is
// exact and documented in event.schema.json.
package schema

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrBadKey reports a Kafka or Redis key that is not in the canonical form.
var ErrBadKey = errors.New("schema: malformed key")

const upperhex = "0123456789ABCDEF"

// unreserved reports whether b is in RFC 3986's unreserved set, the only bytes
// that are written as themselves in a key.
func unreserved(b byte) bool {
	return 'A' <= b && b <= 'Z' || 'a' <= b && b <= 'z' || '0' <= b && b <= '9' ||
		b == '-' || b == '.' || b == '_' || b == '~'
}

// Escape percent-encodes every byte outside RFC 3986's unreserved set as %XX
// with uppercase hex. The result never contains '/', '{', '}' or ':', so it
// can be joined unambiguously and used inside a Redis Cluster hash tag.
func Escape(s string) string {
	n := 0
	for i := 0; i < len(s); i++ {
		if !unreserved(s[i]) {
			n++
		}
	}
	if n == 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 2*n)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if unreserved(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(upperhex[c>>4])
		b.WriteByte(upperhex[c&15])
	}
	return b.String()
}

// Unescape is the exact inverse of Escape: it rejects lowercase hex, raw
// reserved bytes and truncated escapes so that every key has one spelling.
func Unescape(s string) (string, error) {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case unreserved(c):
			b.WriteByte(c)
		case c == '%':
			if i+2 >= len(s) {
				return "", fmt.Errorf("%w: truncated escape in %q", ErrBadKey, s)
			}
			hi, ok1 := unhex(s[i+1])
			lo, ok2 := unhex(s[i+2])
			if !ok1 || !ok2 {
				return "", fmt.Errorf("%w: bad escape %q in %q", ErrBadKey, s[i:i+3], s)
			}
			d := hi<<4 | lo
			if unreserved(d) {
				return "", fmt.Errorf("%w: unreserved byte %q must not be escaped in %q", ErrBadKey, d, s)
			}
			b.WriteByte(d)
			i += 2
		default:
			return "", fmt.Errorf("%w: byte %q must be escaped in %q", ErrBadKey, c, s)
		}
	}
	return b.String(), nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// Key is the Kafka record key of an item: "<tenant>/<item>", each part escaped.
func Key(tenant, item string) string {
	return Escape(tenant) + "/" + Escape(item)
}

// ParseKey is the inverse of Key.
func ParseKey(key string) (tenant, item string, err error) {
	et, ei, ok := strings.Cut(key, "/")
	if !ok || et == "" || ei == "" {
		return "", "", fmt.Errorf("%w: %q is not <tenant>/<item>", ErrBadKey, key)
	}
	if tenant, err = Unescape(et); err != nil {
		return "", "", err
	}
	if item, err = Unescape(ei); err != nil {
		return "", "", err
	}
	return tenant, item, nil
}

// markerPrefix starts every marker key. The NUL byte can never begin an item
// key (Key escapes it), so markers and items never collide.
const markerPrefix = "\x00tidemark/p/"

// MarkerKey is the key of resolved and reset markers sent to partition p.
// One key per partition lets compaction keep the newest marker of each.
func MarkerKey(partition int32) string {
	return markerPrefix + strconv.FormatInt(int64(partition), 10)
}

// ParseMarkerKey returns the partition a marker key names.
func ParseMarkerKey(key string) (int32, bool) {
	rest, ok := strings.CutPrefix(key, markerPrefix)
	if !ok {
		return 0, false
	}
	p, err := strconv.ParseInt(rest, 10, 32)
	if err != nil || p < 0 || strconv.FormatInt(p, 10) != rest {
		return 0, false
	}
	return int32(p), true
}

// IsMarkerKey reports whether key belongs to a marker rather than an item.
func IsMarkerKey(key string) bool { return strings.HasPrefix(key, "\x00") }

// RedisKey is the cache-tier hash of an item: "<ns>:v1:{<tenant>/<item>}".
// The braces are a Redis Cluster hash tag: all of an item lives on one slot.
func RedisKey(ns, tenant, item string) string {
	return ns + ":v1:{" + Key(tenant, item) + "}"
}

// ParseRedisKey is the inverse of RedisKey.
func ParseRedisKey(ns, key string) (tenant, item string, err error) {
	rest, ok := strings.CutPrefix(key, ns+":v1:{")
	if !ok || !strings.HasSuffix(rest, "}") {
		return "", "", fmt.Errorf("%w: %q is not a %s item key", ErrBadKey, key, ns)
	}
	return ParseKey(strings.TrimSuffix(rest, "}"))
}

// RedisKeyPattern matches every item hash of a namespace (for SCAN).
func RedisKeyPattern(ns string) string { return ns + ":v1:{*}" }

// WatermarkKey is the hash holding the freshness watermark of a namespace.
func WatermarkKey(ns string) string { return ns + ":v1:_tidemark" }

// Fields of the watermark hash; values are unix milliseconds except partitions.
const (
	FieldResetAt    = "reset_at"
	FieldPartitions = "partitions"
	// FieldPartitionsGrownFrom and FieldPartitionsGrownAt (Redis time, unix
	// ms) record the last growth of FieldPartitions.
	FieldPartitionsGrownFrom = "partitions_grown_from"
	FieldPartitionsGrownAt   = "partitions_grown_at"
	// FieldFutureRefused counts resolved times the cache tier refused for
	// being ahead of its clock; FieldFutureRefusedAt (Redis time, unix ms),
	// FieldFutureRefusedField and FieldFutureRefusedValue describe the last.
	FieldFutureRefused      = "future_refused"
	FieldFutureRefusedAt    = "future_refused_at"
	FieldFutureRefusedField = "future_refused_field"
	FieldFutureRefusedValue = "future_refused_value"
)

// WatermarkField is the watermark hash field of partition p: "p<N>".
func WatermarkField(partition int32) string {
	return "p" + strconv.FormatInt(int64(partition), 10)
}

// WatermarkSourceField is the watermark hash field holding the source of
// the resolved marker that last set partition p's watermark: "s<N>"
// (Resolved.Source; absent when its marker named none).
func WatermarkSourceField(partition int32) string {
	return "s" + strconv.FormatInt(int64(partition), 10)
}

// Item hash fields: a public contract, read by operators with redis-cli.
const (
	FieldVersion  = "v"     // payload version
	FieldPayload  = "p"     // payload bytes
	FieldObs      = "obs"   // source-read start, unix ms
	FieldSoft     = "soft"  // soft expiry, unix ms
	FieldHard     = "hard"  // hard expiry, unix ms
	FieldNotFound = "nf"    // "1" when the entry caches a not-found answer
	FieldFloor    = "floor" // min_source_version: nothing below it is served or filled
	FieldGen      = "gen"   // generation, bumped by every effective invalidation
	FieldToken    = "tok"   // active lease token
	FieldTokenExp = "texp"  // lease expiry, unix ms (Redis server time)
	FieldStale    = "stale" // "1" once invalidated
)

// IdentityKey is the hash binding a namespace to its deployment: the table
// mapping its readers read, its appliers' consumer group, its source pool.
func IdentityKey(ns string) string { return ns + ":v1:_identity" }

// Fields of the identity hash.
const (
	FieldIdentityMapping = "mapping"
	FieldIdentityGroup   = "group"
	FieldIdentityPool    = "pool"
)
