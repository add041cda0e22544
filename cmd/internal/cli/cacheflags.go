package cli

import "github.com/tidemark/tidemark/cache"

// CacheFlags binds the cache-tier protocol settings into cfg. Every process
// that talks to one namespace (serve, apply, replay, dev) must use the same
// values, so they are one set of flags with one meaning wherever they appear.
func CacheFlags(b *Binder, cfg *cache.Config) {
	b.shared(&cfg.Lease, "cache-lease", "Fill lease lifetime, on the Redis server clock.")
	b.shared(&cfg.HardLifetime, "cache-hard-lifetime", "Hard lifetime of a cached value from its effective observation (at most 29.8s; the applier rewinds 29.8s after a failover whatever this says).")
	b.shared(&cfg.SoftMin, "cache-soft-min", "Soft expiry lower bound (jittered up to --cache-soft-max).")
	b.shared(&cfg.SoftMax, "cache-soft-max", "Soft expiry upper bound.")
	b.shared(&cfg.NegativeTTL, "cache-negative-ttl", "Lifetime of a not-found entry.")
	b.shared(&cfg.FloorTTL, "cache-floor-ttl", "How long a version floor is kept for a key without a value (at least --cache-hard-lifetime).")
	b.shared(&cfg.MaxAge, "cache-max-age", "Bound of a cache key's physical TTL; never shortens a valid entry.")
	b.shared(&cfg.WatermarkPoll, "watermark-poll", "How often the freshness watermark is re-read from Redis.")
}

// EvictionFlag binds --allow-allkeys-eviction into cfg.
func EvictionFlag(b *Binder, cfg *cache.Config) {
	b.shared(&cfg.AllowAllKeysEviction, "allow-allkeys-eviction", "Start even if Redis's maxmemory-policy is allkeys-*, which may evict the watermark hash (use volatile-lru instead).")
}
