package cache

import (
	"net/url"

	"github.com/redis/go-redis/v9"
)

// ParseRedisURL turns a cache-tier URL into a client by the URL's shape
// alone: "redis://host:port/db" is a standalone server; a comma-separated
// seed list "redis://h1:p1,h2:p2" is a Redis Cluster (db must be 0 or
// absent); redis+sentinel://s1,s2/master a Sentinel set. OpenRedis takes
// the rest (mode, TLS files, secrets from files).
func ParseRedisURL(s string) (redis.UniversalClient, error) {
	return OpenRedis(RedisConfig{URL: s}, nil)
}

// redact hides a password in error messages.
func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	return u.Redacted()
}
