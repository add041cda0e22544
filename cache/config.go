package cache

import (
	"time"

	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/promise"
)

// Config is the cache tier's protocol configuration. Every process that talks
// to one namespace (API, applier) must use the same values.
type Config struct {
	Namespace     string        // key prefix <ns>:v1:...
	Lease         time.Duration // lease token lifetime, on the Redis server clock
	HardLifetime  time.Duration // hard = effObs + HardLifetime
	SoftMin       time.Duration // soft = effObs + uniform(SoftMin, SoftMax)
	SoftMax       time.Duration
	NegativeTTL   time.Duration // lifetime of a not-found entry
	FloorTTL      time.Duration // how long a floor is kept for a key without a value
	MaxAge        time.Duration // physical key TTL bound; never shortens a valid entry
	WatermarkPoll time.Duration // how often Run re-reads the watermark hash
	// AllowAllKeysEviction lets CheckEvictionPolicy accept an allkeys-*
	// maxmemory-policy (which may evict the watermark hash).
	AllowAllKeysEviction bool
}

// DefaultConfig is the design's figures: the promise's hard lifetime
// (promise.HardLifetime), 1 s lease, soft expiry jittered over 3-5 s, 2 s negative cache.
func DefaultConfig() Config {
	return Config{
		Namespace:     promise.Namespace,
		Lease:         time.Second,
		HardLifetime:  promise.HardLifetime,
		SoftMin:       3 * time.Second,
		SoftMax:       5 * time.Second,
		NegativeTTL:   2 * time.Second,
		FloorTTL:      60 * time.Second,
		MaxAge:        10 * time.Minute,
		WatermarkPoll: 250 * time.Millisecond,
	}
}

// Validate reports every problem at once, one config.FieldError per field.
func (c Config) Validate() error {
	var p config.Problems
	if c.Namespace == "" {
		p.Add("Namespace", "must not be empty")
	}
	for _, b := range []byte(c.Namespace) {
		// A brace would break the Cluster hash tag; ':' and space would make
		// keys ambiguous for operators.
		if b == '{' || b == '}' || b == ':' || b <= ' ' || b >= 0x7f {
			p.Add("Namespace", "%q must not contain braces, ':', spaces or control bytes", c.Namespace)
			break
		}
	}
	ms := func(field string, d time.Duration) {
		if d < time.Millisecond {
			p.Add(field, "must be at least 1ms (got %s)", d)
		}
	}
	ms("Lease", c.Lease)
	ms("HardLifetime", c.HardLifetime)
	if c.HardLifetime > promise.HardLifetime {
		// Longer would serve a value older than the promise once two
		// clocks are the allowed bound apart.
		p.Add("HardLifetime", "must be at most %s, the promise minus twice the clock bound (got %s)", promise.HardLifetime, c.HardLifetime)
	}
	ms("SoftMin", c.SoftMin)
	ms("SoftMax", c.SoftMax)
	ms("NegativeTTL", c.NegativeTTL)
	ms("FloorTTL", c.FloorTTL)
	ms("MaxAge", c.MaxAge)
	ms("WatermarkPoll", c.WatermarkPoll)
	if c.SoftMax < c.SoftMin {
		p.Add("SoftMax", "(%s) must be >= the soft minimum (%s)", c.SoftMax, c.SoftMin)
	}
	if c.SoftMax > c.HardLifetime {
		p.Add("SoftMax", "(%s) must be <= the hard lifetime (%s)", c.SoftMax, c.HardLifetime)
	}
	if c.NegativeTTL > c.HardLifetime {
		p.Add("NegativeTTL", "(%s) must be <= the hard lifetime (%s)", c.NegativeTTL, c.HardLifetime)
	}
	if c.MaxAge < c.HardLifetime+c.Lease {
		p.Add("MaxAge", "(%s) must be >= the hard lifetime + the lease (%s)", c.MaxAge, c.HardLifetime+c.Lease)
	}
	// An invalidated value stays servable (stale) until its hard deadline;
	// INVALIDATE sets the key's TTL to FloorTTL, which must not cut it short.
	if c.FloorTTL < c.HardLifetime || c.FloorTTL < c.NegativeTTL {
		p.Add("FloorTTL", "(%s) must be >= the hard lifetime (%s) and the negative TTL (%s)", c.FloorTTL, c.HardLifetime, c.NegativeTTL)
	}
	if c.MaxAge < c.FloorTTL {
		p.Add("MaxAge", "(%s) must be >= the floor TTL (%s)", c.MaxAge, c.FloorTTL)
	}
	return p.Err()
}
