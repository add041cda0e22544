package cache

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"tidemark/schema"
)

// Run polls the watermark hash every WatermarkPoll until ctx ends, so that
// Lookup passes a recent W and reset_at. A failed poll keeps the previous
// value: an older W only extends fewer entries, which is safe.
func (c *Client) Run(ctx context.Context) error {
	t := time.NewTicker(c.cfg.WatermarkPoll)
	defer t.Stop()
	failing := false
	for {
		wm, err := c.ReadWatermark(ctx)
		switch {
		case err != nil && ctx.Err() != nil:
			return nil
		case err != nil:
			if !failing {
				c.log.Warn("watermark poll failed; keeping the last value", "err", err)
			}
			failing = true
		default:
			if failing {
				c.log.Info("watermark poll recovered")
			}
			failing = false
			c.wm.Store(&wm)
		}
		c.observeAge()
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// observeAge sets the watermark age gauge from the latest poll.
func (c *Client) observeAge() {
	wm := c.Watermark()
	if !wm.Known {
		c.m.watermarkAge.Set(math.Inf(1))
		return
	}
	c.m.watermarkAge.Set(time.Since(wm.W).Seconds())
}

// Watermark is the value of the latest poll by Run (the zero Watermark,
// unknown, before the first one).
func (c *Client) Watermark() Watermark { return *c.wm.Load() }

// ReadWatermark reads the watermark hash now.
func (c *Client) ReadWatermark(ctx context.Context) (Watermark, error) {
	h, err := c.rdb.HGetAll(ctx, c.wmKey).Result()
	if err != nil {
		return Watermark{}, fmt.Errorf("cache: read watermark %s: %w", c.wmKey, err)
	}
	wm, err := parseWatermark(h)
	if err != nil {
		return Watermark{}, fmt.Errorf("cache: read watermark %s: %w", c.wmKey, err)
	}
	return wm, nil
}

// FieldIdentity is the watermark hash field holding the cache tier identity
// (ServerIdentity) the applier verified when it last wrote a watermark.
const FieldIdentity = "identity"

func parseWatermark(h map[string]string) (Watermark, error) {
	wm := Watermark{PerPartition: map[int32]time.Time{}, ReadAt: time.Now(), Found: len(h) > 0}
	for f, v := range h {
		switch {
		case f == FieldIdentity:
			wm.Identity = v
		case f == schema.FieldPartitions:
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return Watermark{}, fmt.Errorf("field %s = %q is not a partition count", f, v)
			}
			wm.Partitions = n
		case f == schema.FieldResetAt:
			ms, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return Watermark{}, fmt.Errorf("field %s = %q is not unix ms", f, v)
			}
			wm.ResetAt = time.UnixMilli(ms)
		case strings.HasPrefix(f, "p"):
			p, err := strconv.ParseInt(f[1:], 10, 32)
			if err != nil || p < 0 {
				continue // not ours: operators may add fields
			}
			ms, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return Watermark{}, fmt.Errorf("field %s = %q is not unix ms", f, v)
			}
			wm.PerPartition[int32(p)] = time.UnixMilli(ms)
		}
	}
	// W is a promise about every partition: unknown while any is missing.
	wm.Known = wm.Partitions > 0
	for p := 0; p < wm.Partitions && wm.Known; p++ {
		ts, ok := wm.PerPartition[int32(p)]
		if !ok {
			wm.Known = false
			break
		}
		if p == 0 || ts.Before(wm.W) {
			wm.W = ts
		}
	}
	if !wm.Known {
		wm.W = time.Time{}
	}
	return wm, nil
}

// SetWatermark raises partition's watermark to ts (never lowers it).
func (c *Client) SetWatermark(ctx context.Context, partition int32, ts time.Time) error {
	return c.SetWatermarkIdentity(ctx, partition, ts, "")
}

// SetWatermarkIdentity is SetWatermark that also stores identity (when not
// empty), the ServerIdentity the caller verified, in the same atomic write:
// the stored identity always belongs to a writer that knew the tier's state.
func (c *Client) SetWatermarkIdentity(ctx context.Context, partition int32, ts time.Time, identity string) error {
	if partition < 0 {
		return fmt.Errorf("cache: set watermark: negative partition %d", partition)
	}
	args := []any{schema.WatermarkField(partition), ts.UnixMilli()}
	if identity != "" {
		args = append(args, identity)
	}
	if err := c.s.raise.Run(ctx, c.rdb, []string{c.wmKey}, args...).Err(); err != nil {
		return fmt.Errorf("cache: set watermark p%d: %w", partition, err)
	}
	return nil
}

// SetResetAt raises reset_at to ts (never lowers it): entries observed
// before it are no longer extended by the watermark.
func (c *Client) SetResetAt(ctx context.Context, ts time.Time) error {
	if err := c.raise(ctx, schema.FieldResetAt, ts); err != nil {
		return fmt.Errorf("cache: set reset_at: %w", err)
	}
	return nil
}

// SetPartitions records the topic's partition count.
func (c *Client) SetPartitions(ctx context.Context, n int) error {
	if n <= 0 {
		return fmt.Errorf("cache: set partitions: %d is not a partition count", n)
	}
	if err := c.rdb.HSet(ctx, c.wmKey, schema.FieldPartitions, n).Err(); err != nil {
		return fmt.Errorf("cache: set partitions: %w", err)
	}
	return nil
}

func (c *Client) raise(ctx context.Context, field string, ts time.Time) error {
	return c.s.raise.Run(ctx, c.rdb, []string{c.wmKey}, field, ts.UnixMilli()).Err()
}
