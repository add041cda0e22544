package localserver

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// FormCluster splits the 16384 slots evenly over cluster-enabled nodes (no
// replicas), introduces them to each other and waits until all agree.
func FormCluster(ctx context.Context, nodes []*Redis) error {
	per := 16384 / len(nodes)
	for i, r := range nodes {
		c := redis.NewClient(&redis.Options{Addr: r.Addr, ContextTimeoutEnabled: true})
		lo, hi := i*per, (i+1)*per-1
		if i == len(nodes)-1 {
			hi = 16383
		}
		err := c.ClusterAddSlotsRange(ctx, lo, hi).Err()
		if err == nil && i > 0 {
			port := nodes[0].Port
			if nodes[0].cfg.TLS != nil { // tls-cluster: the bus is the TLS port's + 10000
				port = nodes[0].tlsPort
			}
			err = c.ClusterMeet(ctx, "127.0.0.1", strconv.Itoa(port)).Err()
		}
		c.Close()
		if err != nil {
			return fmt.Errorf("localserver: form cluster: %w", err)
		}
	}
	return WaitClusterReady(ctx, nodes)
}

// WaitClusterReady waits until every node reports cluster_state:ok and knows
// all nodes.
func WaitClusterReady(ctx context.Context, nodes []*Redis) error {
	for _, r := range nodes {
		c := redis.NewClient(&redis.Options{Addr: r.Addr, ContextTimeoutEnabled: true})
		for {
			info, err := c.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") &&
				strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(len(nodes))) {
				break
			}
			select {
			case <-ctx.Done():
				c.Close()
				return fmt.Errorf("localserver: cluster not ready: %v %s", err, info)
			case <-time.After(50 * time.Millisecond):
			}
		}
		c.Close()
	}
	return nil
}
