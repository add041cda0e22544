package cache

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tidemark/tidemark/schema"
)

// Hot-key read replicas. A hot entry gets N copies under keys whose hash
// tags land on different Cluster masters. A copy set is built for one
// version from one snapshot of the primary entry: every copy carries the
// primary's version, observation and absolute deadlines, never new ones, and
// no lease. The set is read back and verified (N of N, same version and
// checksum) before REPLICA_SWITCH publishes its manifest in the primary hash
// (field FieldReplicas) — and only while the primary still holds that
// version, not invalidated. INVALIDATE deletes the manifest in the same
// script that raises the floor, FILL when it installs a new value, and
// LOOKUP hands it out only on a hit of exactly its version. A reader keeps a
// manifest for at most the L1 lifetime; copies expire at their soft
// deadline (before their hard one), so a retired set dies by itself.

// FieldReplicas is the primary-hash field holding the published manifest;
// FieldReplicaLock is the build lock (unix ms, Redis time) of REPLICA_SOURCE.
const (
	FieldReplicas    = "rep"
	FieldReplicaLock = "rlk"
)

// Manifest names a verified copy set of one version. Its wire form (the
// value of FieldReplicas) is "<version> <hard_ms> <soft_ms> <sum> <set>
// <salt>,<salt>,...": the scripts read the first three fields.
type Manifest struct {
	Version    int64
	Hard, Soft time.Time // the copies' absolute deadlines
	Sum        string    // hex SHA1 of the payload
	Set        string    // names this build: a new set never overwrites an old one
	Salts      []int     // one per copy: picks the copy's hash tag (see ReplicaKey)
}

// N is the number of copies.
func (m Manifest) N() int { return len(m.Salts) }

func (m Manifest) String() string {
	salts := make([]string, len(m.Salts))
	for i, s := range m.Salts {
		salts[i] = strconv.Itoa(s)
	}
	return fmt.Sprintf("%d %d %d %s %s %s", m.Version, m.Hard.UnixMilli(), m.Soft.UnixMilli(), m.Sum, m.Set, strings.Join(salts, ","))
}

// ParseManifest is the inverse of Manifest.String.
func ParseManifest(s string) (Manifest, error) {
	f := strings.Fields(s)
	bad := func() (Manifest, error) { return Manifest{}, fmt.Errorf("replica manifest %q is malformed", s) }
	if len(f) != 6 {
		return bad()
	}
	v, err1 := strconv.ParseInt(f[0], 10, 64)
	hard, err2 := strconv.ParseInt(f[1], 10, 64)
	soft, err3 := strconv.ParseInt(f[2], 10, 64)
	if errors.Join(err1, err2, err3) != nil || len(f[3]) != 2*sha1.Size || f[4] == "" {
		return bad()
	}
	m := Manifest{Version: v, Hard: time.UnixMilli(hard), Soft: time.UnixMilli(soft), Sum: f[3], Set: f[4]}
	for _, p := range strings.Split(f[5], ",") {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return bad()
		}
		m.Salts = append(m.Salts, n)
	}
	return m, nil
}

// ReplicaKey is copy i of a set: <ns>:v1:_rep:{<tenant>/<item>/<set>.<i>.<salt>}.
// The hash tag is the whole braced part, so each copy has its own slot; the
// builder picks salt so that the copies land on different masters. The
// second '/' cannot occur in an item key (schema.Key escapes it), and the
// _rep prefix keeps copies out of the item-key pattern.
func ReplicaKey(ns, tenant, item, set string, i, salt int) string {
	return ns + ":v1:_rep:{" + replicaTag(tenant, item, set, i, salt) + "}"
}

func replicaTag(tenant, item, set string, i, salt int) string {
	return schema.Key(tenant, item) + "/" + set + "." + strconv.Itoa(i) + "." + strconv.Itoa(salt)
}

// ReplicaSnapshot is REPLICA_SOURCE's answer.
type ReplicaSnapshot struct {
	Status  string    // "ok", "current", "busy" or "none"
	Entry   Entry     // for "ok"
	Current *Manifest // for "current"
}

// ReplicaSource reads a hot primary entry for a new copy set, taking the
// build lock for lock when it answers "ok". A set that stays servable for at
// least minLeft is "current": nothing to build.
func (c *Client) ReplicaSource(ctx context.Context, tenant, item string, lock, minLeft time.Duration) (ReplicaSnapshot, error) {
	w, reset := c.watermarkArgs()
	r, err := c.s.replicaSource.Run(ctx, c.rdb, []string{c.key(tenant, item)}, w, reset, lock.Milliseconds(), minLeft.Milliseconds()).Slice()
	if err != nil {
		return ReplicaSnapshot{}, fmt.Errorf("cache: replica source %s/%s: %w", tenant, item, err)
	}
	status, _ := r[0].(string)
	switch {
	case status == "ok" && len(r) == 7:
		var n [7]int64
		for _, i := range []int{1, 3, 4, 5, 6} {
			s, _ := r[i].(string)
			if n[i], err = strconv.ParseInt(s, 10, 64); err != nil {
				return ReplicaSnapshot{}, fmt.Errorf("cache: replica source %s/%s: reply[%d] = %v", tenant, item, i, r[i])
			}
		}
		p, _ := r[2].(string)
		return ReplicaSnapshot{Status: status, Entry: Entry{Version: n[1], Payload: []byte(p), Obs: time.UnixMilli(n[3]),
			EffObs: time.UnixMilli(n[4]), Soft: time.UnixMilli(n[5]), Hard: time.UnixMilli(n[6])}}, nil
	case status == "current" && len(r) == 2:
		s, _ := r[1].(string)
		m, err := ParseManifest(s)
		if err != nil {
			return ReplicaSnapshot{}, fmt.Errorf("cache: replica source %s/%s: %w", tenant, item, err)
		}
		return ReplicaSnapshot{Status: status, Current: &m}, nil
	case status == "busy" || status == "none":
		return ReplicaSnapshot{Status: status}, nil
	}
	return ReplicaSnapshot{}, fmt.Errorf("cache: replica source %s/%s: unexpected reply %v", tenant, item, r)
}

// ErrReplicaSet is matched (errors.Is) by every build that published nothing
// because the primary or a copy did not allow it; state is left for the copies'
// own expiry.
var ErrReplicaSet = errors.New("cache: replica set not published")

// BuildReplicas writes n copies of snap (an "ok" ReplicaSource answer) on
// different masters, reads every copy back and checks version and checksum,
// and only then publishes the manifest with REPLICA_SWITCH. A failed step
// publishes nothing (ErrReplicaSet when the cache refused).
func (c *Client) BuildReplicas(ctx context.Context, tenant, item string, snap Entry, n int) (Manifest, error) {
	if n < 1 {
		return Manifest{}, fmt.Errorf("cache: build replicas %s/%s: n = %d", tenant, item, n)
	}
	sum := sha1.Sum(snap.Payload)
	m := Manifest{Version: snap.Version, Hard: snap.Hard, Soft: snap.Soft, Sum: hex.EncodeToString(sum[:]),
		Set: strconv.FormatUint(rand.Uint64()&0xffffffffff, 36)}
	salts, err := c.placeReplicas(ctx, tenant, item, m.Set, n)
	if err != nil {
		return Manifest{}, fmt.Errorf("cache: build replicas %s/%s: %w", tenant, item, err)
	}
	m.Salts = salts
	v := strconv.FormatInt(snap.Version, 10)
	for i, salt := range salts {
		res, err := c.s.replicaPut.Run(ctx, c.rdb, []string{ReplicaKey(c.cfg.Namespace, tenant, item, m.Set, i, salt)},
			v, snap.Payload, snap.Obs.UnixMilli(), snap.EffObs.UnixMilli(), snap.Soft.UnixMilli(), snap.Hard.UnixMilli(), m.Sum).Text()
		if err != nil {
			return Manifest{}, fmt.Errorf("cache: build replicas %s/%s: copy %d: %w", tenant, item, i, err)
		}
		if res != "ok" {
			return Manifest{}, fmt.Errorf("%w: %s/%s copy %d: %s", ErrReplicaSet, tenant, item, i, res)
		}
	}
	// Verified complete: N of N answer with this version and checksum, and
	// the payload each returns hashes to it.
	for i := range salts {
		e, err := c.ReadReplica(ctx, tenant, item, m, i)
		if err != nil {
			return Manifest{}, fmt.Errorf("cache: build replicas %s/%s: verify copy %d: %w", tenant, item, i, err)
		}
		if got := sha1.Sum(e.Payload); e.Version != m.Version || hex.EncodeToString(got[:]) != m.Sum {
			return Manifest{}, fmt.Errorf("%w: %s/%s copy %d does not match", ErrReplicaSet, tenant, item, i)
		}
	}
	w, reset := c.watermarkArgs()
	res, err := c.s.replicaSwitch.Run(ctx, c.rdb, []string{c.key(tenant, item)}, v, m.String(), w, reset).Text()
	if err != nil {
		return Manifest{}, fmt.Errorf("cache: switch replicas %s/%s: %w", tenant, item, err)
	}
	if res != "ok" {
		return Manifest{}, fmt.Errorf("%w: %s/%s switch: %s", ErrReplicaSet, tenant, item, res)
	}
	return m, nil
}

// ErrReplicaUnusable is matched (errors.Is) by a copy that is missing,
// does not match its manifest, or is past its deadline: read another copy or
// the primary.
var ErrReplicaUnusable = errors.New("cache: replica unusable")

// ReadReplica reads copy i of m. The entry is served only as a hit before
// its Soft deadline (Redis's clock checked it; the caller checks its own).
func (c *Client) ReadReplica(ctx context.Context, tenant, item string, m Manifest, i int) (Entry, error) {
	if i < 0 || i >= m.N() {
		return Entry{}, fmt.Errorf("cache: replica %d of %d", i, m.N())
	}
	key := ReplicaKey(c.cfg.Namespace, tenant, item, m.Set, i, m.Salts[i])
	r, err := c.s.replicaRead.Run(ctx, c.rdb, []string{key}, strconv.FormatInt(m.Version, 10), m.Sum).Slice()
	if err != nil {
		return Entry{}, fmt.Errorf("cache: read replica %s: %w", key, err)
	}
	status, _ := r[0].(string)
	if status != "ok" || len(r) != 7 {
		return Entry{}, fmt.Errorf("%w: %s: %s", ErrReplicaUnusable, key, status)
	}
	var n [7]int64
	for _, j := range []int{1, 3, 4, 5, 6} {
		s, _ := r[j].(string)
		if n[j], err = strconv.ParseInt(s, 10, 64); err != nil {
			return Entry{}, fmt.Errorf("cache: read replica %s: reply[%d] = %v", key, j, r[j])
		}
	}
	p, _ := r[2].(string)
	return Entry{Version: n[1], Payload: []byte(p), Obs: time.UnixMilli(n[3]), EffObs: time.UnixMilli(n[4]),
		Soft: time.UnixMilli(n[5]), Hard: time.UnixMilli(n[6])}, nil
}

func (c *Client) watermarkArgs() (w, reset int64) {
	if wm := c.Watermark(); wm.Known {
		w = wm.W.UnixMilli()
		if !wm.ResetAt.IsZero() {
			reset = wm.ResetAt.UnixMilli()
		}
	}
	return w, reset
}

// placeReplicas picks one salt per copy so that the copies' slots belong to
// different masters: the primary's master last, so with fewer copies than
// masters the primary's node is the one spared. Beyond the number of masters
// copies wrap around. A standalone server has one node: salts are 0.
func (c *Client) placeReplicas(ctx context.Context, tenant, item, set string, n int) ([]int, error) {
	salts := make([]int, n)
	cc, ok := c.rdb.(*redis.ClusterClient)
	if !ok {
		return salts, nil
	}
	// CLUSTER SLOTS, not SHARDS: it works on Redis 6 as on 7 and names each
	// master by the address the client dials.
	slots, err := cc.ClusterSlots(ctx).Result() //nolint:staticcheck // SA1019: see above
	if err != nil {
		return nil, fmt.Errorf("cluster slots: %w", err)
	}
	owner := make([]string, 16384) // slot -> master address
	var masters []string
	for _, s := range slots {
		if len(s.Nodes) == 0 {
			continue
		}
		a := s.Nodes[0].Addr
		for i := s.Start; i <= s.End && i < len(owner); i++ {
			owner[i] = a
		}
		if !slices.Contains(masters, a) {
			masters = append(masters, a)
		}
	}
	if len(masters) == 0 {
		return nil, errors.New("cluster has no slots assigned")
	}
	slices.Sort(masters)
	primary := owner[keySlot(schema.Key(tenant, item))]
	if i := slices.Index(masters, primary); i >= 0 {
		masters = append(append(masters[:i:i], masters[i+1:]...), primary)
	}
	for i := range salts {
		want := masters[i%len(masters)]
		found := false
		// Each try lands on want with probability ~1/len(masters).
		for salt := 0; salt < 64*len(masters); salt++ {
			if owner[keySlot(replicaTag(tenant, item, set, i, salt))] == want {
				salts[i], found = salt, true
				break
			}
		}
		if !found {
			return nil, fmt.Errorf("no hash tag lands on master %s", want)
		}
	}
	return salts, nil
}

// keySlot is Redis Cluster's slot of a hash tag: CRC16 (XMODEM) mod 16384.
func keySlot(tag string) int {
	var crc uint16
	for i := 0; i < len(tag); i++ {
		crc ^= uint16(tag[i]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}
