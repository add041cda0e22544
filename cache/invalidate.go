package cache

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

var invalidateResults = [...]InvalidateResult{InvalidateApplied, InvalidateDuplicate, InvalidateOlder, InvalidateRevoked}

func parseInvalidate(reply any) (InvalidateResult, error) {
	n, ok := reply.(int64)
	if !ok || n < 0 || int(n) >= len(invalidateResults) {
		return "", fmt.Errorf("INVALIDATE replied %v", reply)
	}
	return invalidateResults[n], nil
}

// Invalidate records that (tenant, item) changed at version: the floor rises
// to version and, when newer than the cached value, the lease is revoked and
// the value marked stale. A version not above the floor is still a change
// (docs/design.md, "Freshness watermark"): a value observed before it is
// marked stale and the lease revoked (InvalidateRevoked). Idempotent in
// effect: applied again, it at most costs one more source read.
func (c *Client) Invalidate(ctx context.Context, tenant, item string, version int64) (InvalidateResult, error) {
	reply, err := c.s.invalidate.Run(ctx, c.rdb, []string{c.key(tenant, item)},
		version, c.cfg.FloorTTL.Milliseconds()).Result()
	var res InvalidateResult
	if err == nil {
		res, err = parseInvalidate(reply)
	}
	if err != nil {
		c.m.invalidations.WithLabelValues("error").Inc()
		return "", fmt.Errorf("cache: invalidate %s/%s v%d: %w", tenant, item, version, err)
	}
	c.m.invalidations.WithLabelValues(string(res)).Inc()
	return res, nil
}

// InvalidateBatch invalidates many keys in one pipeline (go-redis splits it
// per node on a Cluster and follows MOVED/ASK). outcomes[i] is for batch[i];
// a per-key Redis error (e.g. WRONGTYPE) is reported in its outcome. A
// returned error means nothing can be assumed applied: retry the whole batch,
// which is idempotent.
func (c *Client) InvalidateBatch(ctx context.Context, batch []Invalidation) ([]InvalidateOutcome, error) {
	out := make([]InvalidateOutcome, len(batch))
	pending := make([]int, len(batch))
	for i := range pending {
		pending[i] = i
	}
	floorTTL := c.cfg.FloorTTL.Milliseconds()
	sha := c.s.invalidate.Hash()
	// go-redis does not retry NOSCRIPT inside a pipeline: load the scripts
	// and re-run only the commands that hit it (once; a second NOSCRIPT
	// means the server keeps losing scripts).
	for attempt := 0; len(pending) > 0; attempt++ {
		cmds := make([]*redis.Cmd, len(pending))
		pipe := c.rdb.Pipeline()
		for j, i := range pending {
			inv := batch[i]
			cmds[j] = pipe.EvalSha(ctx, sha, []string{c.key(inv.Tenant, inv.Item)}, inv.Version, floorTTL)
		}
		_, _ = pipe.Exec(ctx) // errors are read per command below
		var noscript []int
		for j, cmd := range cmds {
			i := pending[j]
			err := cmd.Err()
			if err == nil {
				out[i].Result, err = parseInvalidate(cmd.Val())
			}
			var rerr redis.Error
			switch {
			case err == nil:
			case redis.HasErrorPrefix(err, "NOSCRIPT"):
				noscript = append(noscript, i)
			case errors.As(err, &rerr):
				out[i].Err = fmt.Errorf("cache: invalidate %s/%s v%d: %w", batch[i].Tenant, batch[i].Item, batch[i].Version, err)
			default: // connection-level: the batch's fate is unknown
				c.m.invalidations.WithLabelValues("error").Add(float64(len(batch)))
				return nil, fmt.Errorf("cache: invalidate batch of %d: %w", len(batch), err)
			}
		}
		if len(noscript) > 0 && attempt > 0 {
			return nil, fmt.Errorf("cache: invalidate batch of %d: NOSCRIPT after loading scripts", len(batch))
		}
		if len(noscript) > 0 {
			c.log.Info("scripts missing on the server, loading them", "keys", len(noscript))
			if err := c.LoadScripts(ctx); err != nil {
				return nil, fmt.Errorf("cache: invalidate batch of %d: %w", len(batch), err)
			}
		}
		pending = noscript
	}
	counts := map[InvalidateResult]int{}
	for _, o := range out {
		if o.Err != nil {
			counts["error"]++
		} else {
			counts[o.Result]++
		}
	}
	for r, n := range counts {
		c.m.invalidations.WithLabelValues(string(r)).Add(float64(n))
	}
	return out, nil
}

// Purge deletes the item's hash entirely: value, floor and lease. Used when
// the invalidation state of a key is unknown (e.g. after an undecodable
// record); the next reader misses and reads the source.
func (c *Client) Purge(ctx context.Context, tenant, item string) error {
	if err := c.rdb.Del(ctx, c.key(tenant, item)).Err(); err != nil {
		return fmt.Errorf("cache: purge %s/%s: %w", tenant, item, err)
	}
	return nil
}
