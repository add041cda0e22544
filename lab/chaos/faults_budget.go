package chaos

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/tidemark/tidemark/lab/localserver"
)

// FaultServeRedisCut cuts one serve process off from Redis while the other
// keeps it (each serve process reaches Redis through its own TCP proxy), under
// a cold-read burst on both: the cut-off process admits source reads locally
// at its share while the other spends the shared budget, and the source must
// still see no more than the budget (issue 36: with the process on Redis not
// reserving the cut-off one's share it saw rate × 1.5). Held past the
// presence TTL (8 s), so the cut-off process's hold is covered too. Only
// against one Redis server: a Cluster's redirections name the servers
// themselves, past any proxy.
const FaultServeRedisCut = "serve-redis-cut"

// serveProxies puts a proxy in front of the Redis server for each serve
// process and returns the URL each is to use.
func (s *system) serveProxies(n int) ([]string, error) {
	var urls []string
	for range n {
		p, err := localserver.NewProxy(s.redis[0].Addr)
		if err != nil {
			return nil, err
		}
		s.proxies = append(s.proxies, p)
		urls = append(urls, strings.Replace(s.redisURL, s.redis[0].Addr, p.Addr, 1))
	}
	return urls, nil
}

// serveRedisCut cuts a random serve process's proxy for hold with the cold
// burst on, then restores it.
func (in *injector) serveRedisCut(ctx context.Context, hold time.Duration) (string, error) {
	s := in.sys
	if len(s.proxies) != len(s.serves) {
		return "", fmt.Errorf("serve processes reach Redis through %d proxies, not one each", len(s.proxies))
	}
	i := in.intn(len(s.serves))
	// Ids no one has: the process on Redis caches none of them, so it
	// spends its whole rate, and the cut-off one its share on top unless
	// the first reserves it.
	in.load.coldAbsent.Store(true)
	defer in.load.coldAbsent.Store(false)
	in.load.coldUntil.Store(time.Now().Add(hold).UnixNano())
	s.proxies[i].Cut()
	sleep(ctx, hold)
	s.proxies[i].Restore()
	return fmt.Sprintf("%s cut off from Redis, %g reads/s of absent ids", s.serves[i].Name(), 3*s.cfg.SourceBudget), nil
}
