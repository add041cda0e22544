package cache

import (
	"errors"
	"fmt"
	"time"
)

// Config is the cache tier's protocol configuration. Every process that talks
// to one namespace (API, applier) must use the same values.
type Config struct {
	Namespace     string        // key prefix <ns>:v1:... (--namespace)
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

// DefaultConfig is the design's figures: 30 s freshness minus 2 x 100 ms
// clock skew, 1 s lease, soft expiry jittered over 3-5 s, 2 s negative cache.
func DefaultConfig() Config {
	return Config{
		Namespace:     "catalog",
		Lease:         time.Second,
		HardLifetime:  29800 * time.Millisecond,
		SoftMin:       3 * time.Second,
		SoftMax:       5 * time.Second,
		NegativeTTL:   2 * time.Second,
		FloorTTL:      60 * time.Second,
		MaxAge:        10 * time.Minute,
		WatermarkPoll: 250 * time.Millisecond,
	}
}

// Validate reports every problem at once, each naming its flag.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if c.Namespace == "" {
		bad("--namespace must not be empty")
	}
	for _, b := range []byte(c.Namespace) {
		// A brace would break the Cluster hash tag; ':' and space would make
		// keys ambiguous for operators.
		if b == '{' || b == '}' || b == ':' || b <= ' ' || b >= 0x7f {
			bad("--namespace %q: must not contain braces, ':', spaces or control bytes", c.Namespace)
			break
		}
	}
	ms := func(flag string, d time.Duration) {
		if d < time.Millisecond {
			bad("%s must be at least 1ms, got %s", flag, d)
		}
	}
	ms("--cache-lease", c.Lease)
	ms("--cache-hard-lifetime", c.HardLifetime)
	ms("--cache-soft-min", c.SoftMin)
	ms("--cache-soft-max", c.SoftMax)
	ms("--cache-negative-ttl", c.NegativeTTL)
	ms("--cache-floor-ttl", c.FloorTTL)
	ms("--cache-max-age", c.MaxAge)
	ms("--watermark-poll", c.WatermarkPoll)
	if c.SoftMax < c.SoftMin {
		bad("--cache-soft-max (%s) must be >= --cache-soft-min (%s)", c.SoftMax, c.SoftMin)
	}
	if c.SoftMax > c.HardLifetime {
		bad("--cache-soft-max (%s) must be <= --cache-hard-lifetime (%s)", c.SoftMax, c.HardLifetime)
	}
	if c.NegativeTTL > c.HardLifetime {
		bad("--cache-negative-ttl (%s) must be <= --cache-hard-lifetime (%s)", c.NegativeTTL, c.HardLifetime)
	}
	if c.MaxAge < c.HardLifetime+c.Lease {
		bad("--cache-max-age (%s) must be >= --cache-hard-lifetime + --cache-lease (%s)", c.MaxAge, c.HardLifetime+c.Lease)
	}
	// An invalidated value stays servable (stale) until its hard deadline;
	// INVALIDATE sets the key's TTL to FloorTTL, which must not cut it short.
	if c.FloorTTL < c.HardLifetime || c.FloorTTL < c.NegativeTTL {
		bad("--cache-floor-ttl (%s) must be >= --cache-hard-lifetime (%s) and --cache-negative-ttl (%s)", c.FloorTTL, c.HardLifetime, c.NegativeTTL)
	}
	if c.MaxAge < c.FloorTTL {
		bad("--cache-max-age (%s) must be >= --cache-floor-ttl (%s)", c.MaxAge, c.FloorTTL)
	}
	return errors.Join(errs...)
}
