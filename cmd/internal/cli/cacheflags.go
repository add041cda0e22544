package cli

import (
	"time"

	"github.com/tidemark/tidemark/cache"
)

// CacheFlags are the cache-tier protocol settings. Every process that talks
// to one namespace (serve, apply, replay, dev) must use the same values, so
// they are one set of flags with one meaning wherever they appear.
type CacheFlags struct {
	CacheLease        time.Duration `field:"cache.Lease,dev.Pipeline.Cache.Lease" name:"cache-lease" env:"TIDEMARK_CACHE_LEASE" default:"${cache_Lease}" help:"Fill lease lifetime, on the Redis server clock."`
	CacheHardLifetime time.Duration `field:"cache.HardLifetime,applier.HardLifetime,dev.Pipeline.Cache.HardLifetime" name:"cache-hard-lifetime" env:"TIDEMARK_CACHE_HARD_LIFETIME" default:"${cache_HardLifetime}" help:"Hard lifetime of a cached value from its effective observation (also the applier's rewind span after a failover)."`
	CacheSoftMin      time.Duration `field:"cache.SoftMin,dev.Pipeline.Cache.SoftMin" name:"cache-soft-min" env:"TIDEMARK_CACHE_SOFT_MIN" default:"${cache_SoftMin}" help:"Soft expiry lower bound (jittered up to --cache-soft-max)."`
	CacheSoftMax      time.Duration `field:"cache.SoftMax,dev.Pipeline.Cache.SoftMax" name:"cache-soft-max" env:"TIDEMARK_CACHE_SOFT_MAX" default:"${cache_SoftMax}" help:"Soft expiry upper bound."`
	CacheNegativeTTL  time.Duration `field:"cache.NegativeTTL,dev.Pipeline.Cache.NegativeTTL" name:"cache-negative-ttl" env:"TIDEMARK_CACHE_NEGATIVE_TTL" default:"${cache_NegativeTTL}" help:"Lifetime of a not-found entry."`
	CacheFloorTTL     time.Duration `field:"cache.FloorTTL,dev.Pipeline.Cache.FloorTTL" name:"cache-floor-ttl" env:"TIDEMARK_CACHE_FLOOR_TTL" default:"${cache_FloorTTL}" help:"How long a version floor is kept for a key without a value (at least --cache-hard-lifetime)."`
	CacheMaxAge       time.Duration `field:"cache.MaxAge,dev.Pipeline.Cache.MaxAge" name:"cache-max-age" env:"TIDEMARK_CACHE_MAX_AGE" default:"${cache_MaxAge}" help:"Bound of a cache key's physical TTL; never shortens a valid entry."`
	WatermarkPoll     time.Duration `field:"cache.WatermarkPoll,dev.Pipeline.Cache.WatermarkPoll" name:"watermark-poll" env:"TIDEMARK_WATERMARK_POLL" default:"${cache_WatermarkPoll}" help:"How often the freshness watermark is re-read from Redis."`
}

// cacheTier is cache.DefaultConfig with these flags and namespace.
func (f CacheFlags) CacheTier(namespace string) cache.Config {
	cfg := cache.DefaultConfig()
	cfg.Namespace = namespace
	cfg.Lease, cfg.HardLifetime, cfg.SoftMin, cfg.SoftMax = f.CacheLease, f.CacheHardLifetime, f.CacheSoftMin, f.CacheSoftMax
	cfg.NegativeTTL, cfg.FloorTTL, cfg.MaxAge, cfg.WatermarkPoll = f.CacheNegativeTTL, f.CacheFloorTTL, f.CacheMaxAge, f.WatermarkPoll
	return cfg
}
