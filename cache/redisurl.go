package cache

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/redis/go-redis/v9"
)

// ParseRedisURL turns --redis into a client: "redis://host:port/db" is a
// standalone server; a comma-separated seed list "redis://h1:p1,h2:p2" is a
// Redis Cluster (db must be 0 or absent). rediss:// and user:password@ work
// for both. Every call's context deadline binds the socket reads and writes
// (ContextTimeoutEnabled): without it a connected but silent Redis holds a
// call for the 3 s default read timeout whatever the caller's deadline.
func ParseRedisURL(s string) (redis.UniversalClient, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("cache: redis URL %q: %w", redact(s), err)
	}
	hosts := strings.Split(u.Host, ",")
	if len(hosts) == 1 {
		opt, err := redis.ParseURL(s)
		if err != nil {
			return nil, fmt.Errorf("cache: redis URL %q: %w", redact(s), err)
		}
		opt.ContextTimeoutEnabled = true
		return redis.NewClient(opt), nil
	}
	if p := strings.Trim(u.Path, "/"); p != "" && p != "0" {
		return nil, fmt.Errorf("cache: redis URL %q: Redis Cluster has only db 0, got %q", redact(s), p)
	}
	q := u.Query()
	for _, h := range hosts[1:] {
		if h == "" {
			return nil, fmt.Errorf("cache: redis URL %q: empty address in seed list", redact(s))
		}
		q.Add("addr", h)
	}
	cu := *u
	cu.Host, cu.Path, cu.RawQuery = hosts[0], "", q.Encode()
	opt, err := redis.ParseClusterURL(cu.String())
	if err != nil {
		return nil, fmt.Errorf("cache: redis URL %q: %w", redact(s), err)
	}
	opt.ContextTimeoutEnabled = true
	return redis.NewClusterClient(opt), nil
}

// redact hides a password in error messages.
func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	return u.Redacted()
}
