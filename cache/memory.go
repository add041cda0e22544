package cache

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Memory is the cache tier's size, summed over every master.
type Memory struct {
	MaxMemory int64 // bytes the masters may hold (INFO memory maxmemory); 0 when any master has no limit
	Used      int64 // bytes they hold (used_memory)
	Keys      int64 // keys they hold (DBSIZE), every namespace and tidemark's own keys included
}

// Entries is how many keys of the current mean size fit in MaxMemory (0:
// unknown, no limit or nothing held yet).
func (m Memory) Entries() int64 {
	if m.MaxMemory <= 0 || m.Used <= 0 || m.Keys <= 0 {
		return 0
	}
	return int64(float64(m.Keys) * float64(m.MaxMemory) / float64(m.Used))
}

// Memory reads the tier's maxmemory, used memory and key count.
func (c *Client) Memory(ctx context.Context) (Memory, error) {
	var mu sync.Mutex
	var out Memory
	unlimited := false
	err := c.forEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		info, err := node.Info(ctx, "memory").Result()
		if err != nil {
			return err
		}
		keys, err := node.DBSize(ctx).Result()
		if err != nil {
			return err
		}
		var max, used int64
		for _, line := range strings.Split(info, "\n") {
			k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
			if !ok {
				continue
			}
			switch k {
			case "maxmemory":
				max, _ = strconv.ParseInt(v, 10, 64)
			case "used_memory":
				used, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		out.MaxMemory += max
		out.Used += used
		out.Keys += keys
		unlimited = unlimited || max == 0
		return nil
	})
	if err != nil {
		return Memory{}, fmt.Errorf("cache: memory: %w", err)
	}
	if unlimited {
		out.MaxMemory = 0
	}
	return out, nil
}
