package cache

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tidemark/tidemark/promise"
	"github.com/tidemark/tidemark/schema"
)

// Run polls the watermark hash every WatermarkPoll until ctx ends, so that
// Lookup passes a recent W and reset_at. A failed poll forgets W until a
// poll succeeds: the server may be coming back from a snapshot without the
// invalidations the last W stood for, and a W read before it would extend
// entries past them (RELIABILITY.md, "Found by the chaos run, not
// explained").
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
				c.log.Warn("watermark poll failed; nothing is extended by the watermark until a poll succeeds", "err", err)
			}
			failing = true
			last := c.Watermark()
			last.Known, last.W = false, time.Time{}
			c.wm.Store(&last)
		default:
			if failing {
				c.log.Info("watermark poll recovered")
			}
			failing = false
			wm = c.judgeSource(wm)
			c.wm.Store(&wm)
			c.repairAhead(ctx, wm)
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
	age := math.Inf(1)
	if wm.Known {
		age = time.Since(wm.W).Seconds()
	}
	c.m.watermarkAge.Set(age)
	c.m.wAge.Set(age)
}

// Watermark is the value of the latest poll by Run (the zero Watermark,
// unknown, before the first one).
func (c *Client) Watermark() Watermark { return *c.wm.Load() }

// repairAhead deletes partition watermarks ahead of the cache tier's clock
// (stored before the cache tier refused them, or left when its clock
// stepped back): kept, they would vouch for entries once real time caught
// up with them. The script checks again against Redis TIME.
func (c *Client) repairAhead(ctx context.Context, wm Watermark) {
	if len(wm.Ahead) == 0 {
		return
	}
	fields := make([]any, len(wm.Ahead))
	for i, p := range wm.Ahead {
		fields[i] = schema.WatermarkField(p)
	}
	n, err := c.s.wmrepair.Run(ctx, c.rdb, []string{c.wmKey}, fields...).Int()
	if err != nil {
		if ctx.Err() == nil {
			c.log.Warn("cannot delete partition watermarks ahead of the cache tier's clock", "partitions", fmt.Sprint(wm.Ahead), "err", err)
		}
		return
	}
	if n > 0 {
		c.m.wmRepairs.Add(float64(n))
		c.log.Error("deleted partition watermarks ahead of the cache tier's clock; they are unknown until their next resolved marker",
			"partitions", fmt.Sprint(wm.Ahead), "redis_time", wm.ServerNow.UTC(), "bound", promise.ClockBound)
	}
}

// ReadWatermark reads the watermark hash now, with the cache tier's clock.
func (c *Client) ReadWatermark(ctx context.Context) (Watermark, error) {
	r, err := c.s.wmread.Run(ctx, c.rdb, []string{c.wmKey}).StringSlice()
	if err != nil {
		return Watermark{}, fmt.Errorf("cache: read watermark %s: %w", c.wmKey, err)
	}
	if len(r)%2 != 1 {
		return Watermark{}, fmt.Errorf("cache: read watermark %s: %d reply elements", c.wmKey, len(r))
	}
	now, err := strconv.ParseInt(r[0], 10, 64)
	if err != nil {
		return Watermark{}, fmt.Errorf("cache: read watermark %s: server time %q", c.wmKey, r[0])
	}
	h := make(map[string]string, len(r)/2)
	for i := 1; i+1 < len(r); i += 2 {
		h[r[i]] = r[i+1]
	}
	wm, err := parseWatermark(h, time.UnixMilli(now))
	if err != nil {
		return Watermark{}, fmt.Errorf("cache: read watermark %s: %w", c.wmKey, err)
	}
	return wm, nil
}

// FieldIdentity is the watermark hash field holding the identity the
// appliers bound (BindWatermarkIdentity): the cache tier's ServerIdentity
// and a generation, new with each bind after a loss or a failover.
const FieldIdentity = "identity"

func parseWatermark(h map[string]string, serverNow time.Time) (Watermark, error) {
	wm := Watermark{PerPartition: map[int32]time.Time{}, ReadAt: time.Now(), Found: len(h) > 0, ServerNow: serverNow}
	for f, v := range h {
		switch {
		case f == FieldIdentity:
			wm.Identity = v
		case f == schema.FieldFutureRefused:
			wm.FutureRefused, _ = strconv.ParseInt(v, 10, 64)
		case f == schema.FieldFutureRefusedAt:
			if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
				wm.FutureRefusedAt = time.UnixMilli(ms)
			}
		case f == schema.FieldFutureRefusedField:
			wm.FutureField = v
		case f == schema.FieldFutureRefusedValue:
			if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
				wm.FutureValue = time.UnixMilli(ms)
			}
		case f == schema.FieldPartitions:
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return Watermark{}, fmt.Errorf("field %s = %q is not a partition count", f, v)
			}
			wm.Partitions = n
		case f == schema.FieldPartitionsGrownFrom:
			wm.GrownFrom, _ = strconv.Atoi(v)
		case f == schema.FieldPartitionsGrownAt:
			if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
				wm.GrownAt = time.UnixMilli(ms)
			}
		case f == schema.FieldResetAt:
			ms, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return Watermark{}, fmt.Errorf("field %s = %q is not unix ms", f, v)
			}
			wm.ResetAt = time.UnixMilli(ms)
		case strings.HasPrefix(f, "s"):
			if p, err := strconv.ParseInt(f[1:], 10, 32); err == nil && p >= 0 {
				if wm.Sources == nil {
					wm.Sources = map[int32]string{}
				}
				wm.Sources[int32(p)] = v
			}
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
	// A partition watermark ahead of the cache tier's clock vouches for
	// nothing (LOOKUP ignores such a W too): it counts as missing.
	if !serverNow.IsZero() {
		for p, ts := range wm.PerPartition {
			if ts.After(serverNow.Add(promise.ClockBound)) {
				wm.Ahead = append(wm.Ahead, p)
			}
		}
		slices.Sort(wm.Ahead)
	}
	// W is a promise about every partition: unknown while any is missing.
	wm.Known = wm.Partitions > 0
	for p := 0; p < wm.Partitions && wm.Known; p++ {
		ts, ok := wm.PerPartition[int32(p)]
		if !ok || slices.Contains(wm.Ahead, int32(p)) {
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

// ErrWatermarkAhead is returned when the cache tier refuses a watermark
// ahead of its clock by more than promise.ClockBound. Nothing was written
// except the refusal count; the partition's watermark stays where it was.
var ErrWatermarkAhead = errors.New("cache: watermark ahead of the cache tier's clock")

// ErrWatermarkIdentity is returned when a watermark write carrying an
// identity finds the hash holding another one (or none): the hash was lost
// and recreated, or another applier bound it anew after a reset; or finds
// itself on a server the identity does not name (a replica promoted in its
// place, a snapshot loaded into another). Nothing was
// written; the writer's applier must set reset_at and rewind
// (BindWatermarkIdentity), not write over the loss.
var ErrWatermarkIdentity = errors.New("cache: the watermark hash's identity is not the one this writer bound (lost or reset)")

// SetWatermarkIdentity is SetWatermark for a writer that bound the hash's
// identity (BindWatermarkIdentity, when not empty): the write is refused
// (ErrWatermarkIdentity) unless the hash still holds that identity. A ts
// ahead of the cache tier's clock by more than promise.ClockBound is
// refused (ErrWatermarkAhead); a stored value that is ahead is replaced.
func (c *Client) SetWatermarkIdentity(ctx context.Context, partition int32, ts time.Time, identity string) error {
	return c.SetWatermarkFrom(ctx, partition, ts, identity, "")
}

// SetWatermarkFrom is SetWatermarkIdentity of a marker of source
// (schema.Resolved.Source; "": none named): the partition's
// WatermarkSourceField records it, and a marker of another source than
// the one recorded replaces the watermark, lower or not.
func (c *Client) SetWatermarkFrom(ctx context.Context, partition int32, ts time.Time, identity, source string) error {
	if partition < 0 {
		return fmt.Errorf("cache: set watermark: negative partition %d", partition)
	}
	args := []any{schema.WatermarkField(partition), ts.UnixMilli(), identity, source}
	r, err := c.s.watermark.Run(ctx, c.rdb, []string{c.wmKey}, args...).Int64Slice()
	if err == nil && len(r) != 2 {
		err = fmt.Errorf("WATERMARK replied %d values, want 2", len(r))
	}
	if err != nil {
		return fmt.Errorf("cache: set watermark p%d: %w", partition, err)
	}
	if r[0] == -2 {
		return fmt.Errorf("%w: set watermark p%d", ErrWatermarkIdentity, partition)
	}
	if r[0] < 0 {
		now := time.UnixMilli(r[1])
		return fmt.Errorf("%w: p%d = %s is %s ahead of Redis TIME %s (bound %s)", ErrWatermarkAhead, partition,
			ts.UTC().Format(time.RFC3339Nano), ts.Sub(now), now.UTC().Format(time.RFC3339Nano), promise.ClockBound)
	}
	return nil
}

// BindWatermarkIdentity binds the watermark hash to server (ServerIdentity)
// and returns the identity stored, "<server>#<generation>", which the
// caller passes to SetWatermarkIdentity: a stored identity of the same
// server is kept and returned (all appliers of the tier share it), any
// other is replaced with a new generation. Called at an applier's start and
// after each reset it makes for a failover or a lost hash.
func (c *Client) BindWatermarkIdentity(ctx context.Context, server string) (string, error) {
	if server == "" || strings.Contains(server, "#") {
		return "", fmt.Errorf("cache: bind watermark identity: %q is not a server identity", server)
	}
	var gen [8]byte
	if _, err := rand.Read(gen[:]); err != nil {
		return "", fmt.Errorf("cache: bind watermark identity: %w", err)
	}
	id, err := c.s.wmidentity.Run(ctx, c.rdb, []string{c.wmKey}, server, hex.EncodeToString(gen[:])).Text()
	if err != nil {
		return "", fmt.Errorf("cache: bind watermark identity: %w", err)
	}
	return id, nil
}

// IdentityServer is the server part of an identity BindWatermarkIdentity
// stored (the whole of one stored before generations existed).
func IdentityServer(id string) string {
	server, _, _ := strings.Cut(id, "#")
	return server
}

// SetResetAt raises reset_at to exactly ts (never lowers it). The pipeline
// marks gaps with MarkGap and MarkGapNow, which add promise.ResetMargin;
// this is for operators and tests.
func (c *Client) SetResetAt(ctx context.Context, ts time.Time) error {
	if err := c.raise(ctx, schema.FieldResetAt, ts); err != nil {
		return fmt.Errorf("cache: set reset_at: %w", err)
	}
	return nil
}

// MarkGap raises reset_at to at + promise.ResetMargin (never lowers it): no
// entry observed before it is extended by the watermark. at comes from a
// clock the design bounds (a commit timestamp, Postgres's clock in a reset
// marker); the margin covers the commit becoming visible after its
// timestamp and two clocks up to promise.ClockBound apart. It returns the
// reset_at now stored.
func (c *Client) MarkGap(ctx context.Context, at time.Time) (time.Time, error) {
	return c.gap(ctx, strconv.FormatInt(at.UnixMilli(), 10))
}

// MarkGapNow is MarkGap at the cache tier's own clock (Redis TIME), for
// gaps noticed by a process (the applier's data loss and failover resets):
// it does not depend on the caller's clock.
func (c *Client) MarkGapNow(ctx context.Context) (time.Time, error) {
	return c.gap(ctx, "now")
}

func (c *Client) gap(ctx context.Context, at string) (time.Time, error) {
	s, err := c.s.gap.Run(ctx, c.rdb, []string{c.wmKey}, at, promise.ResetMargin.Milliseconds()).Text()
	if err != nil {
		return time.Time{}, fmt.Errorf("cache: set reset_at: %w", err)
	}
	ms, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("cache: set reset_at: GAP replied %q", s)
	}
	return time.UnixMilli(ms), nil
}

// SetPartitions raises the watermark's partition count to n (the topic's
// partition count), never lowers it: a count read from a stale view of a
// grown topic must not take a partition out of W. A topic recreated with
// fewer partitions is a new topic: delete the watermark hash (appliers then
// mark a gap and rewind).
func (c *Client) SetPartitions(ctx context.Context, n int) error {
	if n <= 0 {
		return fmt.Errorf("cache: set partitions: %d is not a partition count", n)
	}
	if err := c.s.partitions.Run(ctx, c.rdb, []string{c.wmKey}, n).Err(); err != nil {
		return fmt.Errorf("cache: set partitions: %w", err)
	}
	return nil
}

func (c *Client) raise(ctx context.Context, field string, ts time.Time) error {
	return c.s.raise.Run(ctx, c.rdb, []string{c.wmKey}, field, ts.UnixMilli()).Err()
}
