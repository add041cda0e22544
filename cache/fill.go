package cache

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/tidemark/tidemark/promise"
)

// Fill installs version/payload read from the source at obs (when the source
// read started) with the lease token from Lookup. Deadlines come from obs,
// never from now: soft = obs + uniform(SoftMin, SoftMax), hard = obs +
// HardLifetime. A refusal is a *RejectedError and changes nothing.
func (c *Client) Fill(ctx context.Context, tenant, item string, tok Token, version int64, payload []byte, obs time.Time) error {
	o := obs.UnixMilli()
	jitter := c.cfg.SoftMin
	if span := c.cfg.SoftMax - c.cfg.SoftMin; span > 0 {
		jitter += rand.N(span)
	}
	soft, hard := o+jitter.Milliseconds(), o+c.cfg.HardLifetime.Milliseconds()
	if err := c.fill(ctx, tenant, item, tok, version, payload, o, soft, hard, c.cfg.MaxAge, false); err != nil {
		return fmt.Errorf("cache: fill %s/%s v%d: %w", tenant, item, version, err)
	}
	return nil
}

// FillNotFound installs a negative entry (the item does not exist) for
// NegativeTTL from obs. Its version is the key's floor at fill time.
func (c *Client) FillNotFound(ctx context.Context, tenant, item string, tok Token, obs time.Time) error {
	o := obs.UnixMilli()
	hard := o + c.cfg.NegativeTTL.Milliseconds()
	// The key outlives the entry only as long as a floor must be kept.
	if err := c.fill(ctx, tenant, item, tok, 0, nil, o, hard, hard, max(c.cfg.FloorTTL, c.cfg.NegativeTTL), true); err != nil {
		return fmt.Errorf("cache: fill not-found %s/%s: %w", tenant, item, err)
	}
	return nil
}

// MaxClockOffset is how far any host's clock may be from the cache tier's:
// FILL refuses an observation time further than this in Redis's future.
const MaxClockOffset = promise.ClockBound

func (c *Client) fill(ctx context.Context, tenant, item string, tok Token, version int64, payload []byte,
	obs, soft, hard int64, ttl time.Duration, nf bool) error {
	if tok.IsZero() {
		c.m.fillRejected.WithLabelValues(string(ReasonToken)).Inc()
		return &RejectedError{Reason: ReasonToken}
	}
	flag := "0"
	if nf {
		flag = "1"
	}
	reply, err := c.s.fill.Run(ctx, c.rdb, []string{c.key(tenant, item)},
		tok.String(), version, payload, obs, soft, hard, ttl.Milliseconds(), flag,
		MaxClockOffset.Milliseconds(), c.cfg.HardLifetime.Milliseconds(), promise.Bound.Milliseconds()).Text()
	if err != nil {
		return err
	}
	switch r := Reason(reply); r {
	case "ok":
		return nil
	case ReasonToken, ReasonVersion, ReasonExpired, ReasonClock, ReasonLifetime:
		c.m.fillRejected.WithLabelValues(string(r)).Inc()
		c.log.Debug("fill rejected", "tenant", tenant, "item", item, "version", version, "reason", r)
		return &RejectedError{Reason: r}
	default:
		return fmt.Errorf("FILL replied %q", reply)
	}
}
