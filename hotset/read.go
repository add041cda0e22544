package hotset

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tidemark/tidemark/schema"
)

// Hot is one key of the shared hot set.
type Hot struct {
	Tenant string  `json:"tenant"`
	Item   string  `json:"item"`
	Rate   float64 `json:"reads_per_second"` // decayed average over all serve processes
}

// ReadTop returns the n hottest keys of the namespace (of tenant only, when
// not ""), hottest first. An empty or missing set is an empty answer.
func ReadTop(ctx context.Context, rdb redis.UniversalClient, ns string, n int, tenant string) ([]Hot, error) {
	if n < 1 {
		return nil, fmt.Errorf("hotset: top %d: must be at least 1", n)
	}
	ep, err := rdb.HGetAll(ctx, EpochKey(ns)).Result()
	if err != nil {
		return nil, fmt.Errorf("hotset: read %s: %w", EpochKey(ns), err)
	}
	if len(ep) == 0 {
		return nil, nil // nothing merged yet
	}
	land, err1 := strconv.ParseInt(ep["landmark"], 10, 64)
	tau, err2 := strconv.ParseFloat(ep["tau"], 64)
	if err := errors.Join(err1, err2); err != nil || tau <= 0 {
		return nil, fmt.Errorf("hotset: %s is not landmark/tau: %v", EpochKey(ns), ep)
	}
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("hotset: redis time: %w", err)
	}
	// score = decayed reads as of the landmark's weights; a steady rate r
	// accumulates r*tau, so r = score * exp(-(now-landmark)/tau) / tau.
	scale := math.Exp(-float64(now.Sub(time.UnixMilli(land)).Milliseconds())/tau) / (tau / 1000)
	var out []Hot
	const page = 1000
	for start := int64(0); len(out) < n; start += page {
		zs, err := rdb.ZRevRangeWithScores(ctx, Key(ns), start, start+page-1).Result()
		if err != nil {
			return nil, fmt.Errorf("hotset: read %s: %w", Key(ns), err)
		}
		for _, z := range zs {
			member, _ := z.Member.(string)
			t, item, err := schema.ParseKey(member)
			if err != nil || tenant != "" && t != tenant {
				continue
			}
			out = append(out, Hot{Tenant: t, Item: item, Rate: z.Score * scale})
			if len(out) == n {
				break
			}
		}
		if len(zs) < page {
			break
		}
	}
	return out, nil
}
