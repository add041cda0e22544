package cache

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// ErrEvictionPolicy is matched (errors.Is) by the error of
// CheckEvictionPolicy when a master may evict keys without a TTL.
var ErrEvictionPolicy = errors.New("cache: maxmemory-policy may evict the watermark hash")

// EvictionPolicies returns every master's maxmemory-policy, by address. It
// reads INFO memory, which managed Redis services answer even where CONFIG
// is disabled.
func (c *Client) EvictionPolicies(ctx context.Context) (map[string]string, error) {
	var mu sync.Mutex
	out := map[string]string{}
	err := c.forEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		info, err := node.Info(ctx, "memory").Result()
		if err != nil {
			return fmt.Errorf("%s: %w", node.Options().Addr, err)
		}
		p := infoField(info, "maxmemory_policy")
		if p == "" {
			return fmt.Errorf("%s: INFO memory has no maxmemory_policy", node.Options().Addr)
		}
		mu.Lock()
		out[node.Options().Addr] = p
		mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cache: read maxmemory-policy: %w", err)
	}
	return out, nil
}

// CheckEvictionPolicy refuses a cache tier whose maxmemory-policy is
// allkeys-*: under memory pressure it may evict the TTL-less watermark hash,
// losing reset_at, and entries observed before a gap would be extended
// again. volatile-lru or volatile-ttl evict only keys with a TTL (every
// entry has one; the hash has none); noeviction refuses writes instead,
// which the applier retries. Config.AllowAllKeysEviction turns the refusal
// into nil.
func (c *Client) CheckEvictionPolicy(ctx context.Context) error {
	pols, err := c.EvictionPolicies(ctx)
	if err != nil {
		return err
	}
	var bad []string
	for addr, p := range pols {
		if strings.HasPrefix(p, "allkeys-") {
			bad = append(bad, addr+" ("+p+")")
		}
	}
	if len(bad) == 0 {
		return nil
	}
	sort.Strings(bad)
	if c.cfg.AllowAllKeysEviction {
		c.log.Warn("cache tier may evict the watermark hash (allowed by configuration)", "masters", strings.Join(bad, ", "))
		return nil
	}
	return fmt.Errorf("%w: %s may evict keys without a TTL, including the watermark hash and its reset_at; "+
		"set CONFIG SET maxmemory-policy volatile-lru (or volatile-ttl) on every master, or allow it explicitly",
		ErrEvictionPolicy, strings.Join(bad, ", "))
}
