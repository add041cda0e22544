package cache

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"

	"github.com/redis/go-redis/v9"
)

// NodeRate is one master's command rate as Redis itself samples it
// (INFO stats instantaneous_ops_per_sec).
type NodeRate struct {
	Addr      string  `json:"addr"`
	OpsPerSec float64 `json:"commands_per_second"`
}

// NodeRates reads every master's command rate, sorted by address: how the
// load of hot keys spreads over a Cluster.
func NodeRates(ctx context.Context, rdb redis.UniversalClient) ([]NodeRate, error) {
	c := &Client{rdb: rdb}
	var (
		mu  sync.Mutex
		out []NodeRate
	)
	err := c.forEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		info, err := node.Info(ctx, "stats").Result()
		if err != nil {
			return fmt.Errorf("%s: %w", node.Options().Addr, err)
		}
		ops, err := strconv.ParseFloat(infoField(info, "instantaneous_ops_per_sec"), 64)
		if err != nil {
			return fmt.Errorf("%s: INFO stats has no instantaneous_ops_per_sec", node.Options().Addr)
		}
		mu.Lock()
		out = append(out, NodeRate{Addr: node.Options().Addr, OpsPerSec: ops})
		mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cache: node rates: %w", err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Addr < out[j].Addr })
	return out, nil
}
