package replica

import (
	"math"
	"time"

	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/promise"
)

// Config is hot-key replication. Every serve process may run a Builder on
// the same namespace: the build lock in the primary entry keeps them from
// building the same set twice.
type Config struct {
	Namespace string // cache namespace (keys, hot set)
	// Threshold is the fast hot-set read rate (reads/s over every serve
	// process, hotset.ReadFast) from which a key gets copies; 0 turns
	// building off.
	Threshold float64
	// Replicas is the number of copies of a hot key; 0 sizes it per key
	// from its rate: ceil(rate / SafeQPSPerShard) × AutoFactor.
	Replicas        int
	SafeQPSPerShard float64 // reads/s one Redis master takes for one key with headroom (auto sizing)
	AutoFactor      float64 // 1.5-2: spare copies so one slow node is not the bottleneck
	MaxReplicas     int     // upper bound of an automatic N
	MaxKeys         int     // hottest keys considered per pass
	Interval        time.Duration
	// RenewBefore: a published set is rebuilt when less than this is left
	// before its copies' soft deadline, so a fresh set is switched in before
	// the old one stops serving.
	RenewBefore time.Duration
	// ManifestTTL is how long a reader keeps a manifest it learnt from a
	// lookup: at most the L1 bound (500 ms), so a revoked manifest stops
	// being used as quickly as an L1 entry of the old value.
	ManifestTTL time.Duration
}

// DefaultConfig has building off; N is automatic once a threshold is set.
func DefaultConfig() Config {
	return Config{Namespace: promise.Namespace, SafeQPSPerShard: 20000, AutoFactor: 2, MaxReplicas: 8, MaxKeys: 32,
		Interval: 500 * time.Millisecond, RenewBefore: 1500 * time.Millisecond, ManifestTTL: 500 * time.Millisecond}
}

// MaxManifestTTL is the L1 bound: no reader uses a manifest longer.
const MaxManifestTTL = 500 * time.Millisecond

// Validate reports every problem at once, one config.FieldError per field.
func (c Config) Validate() error {
	var p config.Problems
	if c.Namespace == "" {
		p.Add("Namespace", "must not be empty")
	}
	if c.Threshold < 0 || math.IsNaN(c.Threshold) {
		p.Add("Threshold", "must be 0 (off) or a positive rate (got %v)", c.Threshold)
	}
	if c.Replicas < 0 {
		p.Add("Replicas", "must be 0 (auto) or positive (got %d)", c.Replicas)
	}
	if !(c.SafeQPSPerShard > 0) {
		p.Add("SafeQPSPerShard", "must be positive (got %v)", c.SafeQPSPerShard)
	}
	if c.AutoFactor < 1 || math.IsNaN(c.AutoFactor) {
		p.Add("AutoFactor", "must be at least 1 (got %v)", c.AutoFactor)
	}
	if c.MaxReplicas < 1 {
		p.Add("MaxReplicas", "must be at least 1 (got %d)", c.MaxReplicas)
	}
	if c.MaxKeys < 1 {
		p.Add("MaxKeys", "must be at least 1 (got %d)", c.MaxKeys)
	}
	if c.Interval < 10*time.Millisecond {
		p.Add("Interval", "must be at least 10ms (got %s)", c.Interval)
	}
	if c.RenewBefore <= c.Interval {
		p.Add("RenewBefore", "must be longer than Interval (got %s <= %s)", c.RenewBefore, c.Interval)
	}
	if c.ManifestTTL < 0 || c.ManifestTTL > MaxManifestTTL {
		p.Add("ManifestTTL", "must be between 0 and %s (got %s)", MaxManifestTTL, c.ManifestTTL)
	}
	return p.Err()
}

// Copies is N for a key read at rate reads/s.
func (c Config) Copies(rate float64) int {
	if c.Replicas > 0 {
		return c.Replicas
	}
	n := int(math.Ceil(math.Ceil(rate/c.SafeQPSPerShard) * c.AutoFactor))
	return max(1, min(n, c.MaxReplicas))
}
