package cache

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// newToken makes a 128-bit lease token: unguessable, so only the caller it
// was issued to can fill.
func newToken() (Token, error) {
	var t Token
	if _, err := rand.Read(t[:]); err != nil {
		return Token{}, fmt.Errorf("token: %w", err)
	}
	return t, nil
}

// Lookup answers a read of (tenant, item) that needs at least minVersion
// (0: any). It passes the latest polled watermark to the LOOKUP script, which
// extends the effective observation of unchanged entries (docs/design.md).
func (c *Client) Lookup(ctx context.Context, tenant, item string, minVersion int64) (LookupResult, error) {
	res, err := c.lookup(ctx, tenant, item, minVersion)
	if err != nil {
		c.m.lookup("error").Inc()
		return LookupResult{}, fmt.Errorf("cache: lookup %s/%s: %w", tenant, item, err)
	}
	c.m.lookup(res.Status).Inc()
	return res, nil
}

func (c *Client) lookup(ctx context.Context, tenant, item string, minVersion int64) (LookupResult, error) {
	tok, err := newToken()
	if err != nil {
		return LookupResult{}, err
	}
	w, reset := c.watermarkArgs() // 0: unknown / none
	reply, err := c.s.lookup.Run(ctx, c.rdb, []string{c.key(tenant, item)},
		minVersion, w, reset, tok.String(), c.leaseMs, c.cfg.MaxAge.Milliseconds()).Slice()
	if err != nil {
		return LookupResult{}, err
	}
	return parseLookup(reply, tok)
}

// parseLookup decodes {status, v, p, obs, eff, soft, hard, stale, issued, rep}.
func parseLookup(r []any, tok Token) (LookupResult, error) {
	if len(r) != 10 {
		return LookupResult{}, fmt.Errorf("LOOKUP replied %d values, want 10", len(r))
	}
	status, _ := r[0].(string)
	var n [9]int64
	// The version is a decimal string (exact beyond 2^53) when an entry is
	// returned, the integer 0 otherwise.
	if v, ok := r[1].(string); ok {
		ver, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return LookupResult{}, fmt.Errorf("LOOKUP reply[1] = %q is not a version", v)
		}
		r[1] = ver
	}
	for _, i := range []int{1, 3, 4, 5, 6, 7, 8} {
		v, ok := r[i].(int64)
		if !ok {
			return LookupResult{}, fmt.Errorf("LOOKUP reply[%d] = %T, want integer", i, r[i])
		}
		n[i] = v
	}
	var res LookupResult
	switch Status(status) {
	case StatusHit, StatusStale, StatusNotFound:
		res.Status = Status(status)
		p, _ := r[2].(string)
		res.Entry = Entry{
			Version: n[1],
			Payload: []byte(p),
			Obs:     time.UnixMilli(n[3]),
			EffObs:  time.UnixMilli(n[4]),
			Soft:    time.UnixMilli(n[5]),
			Hard:    time.UnixMilli(n[6]),
			Stale:   n[7] == 1,
		}
		if res.Status == StatusNotFound {
			res.Entry.Payload = nil
		}
	case StatusMiss, StatusWait:
		res.Status = Status(status)
	default:
		return LookupResult{}, fmt.Errorf("LOOKUP replied unknown status %q", status)
	}
	if n[8] == 1 {
		res.Token = tok
	}
	if rep, _ := r[9].(string); rep != "" && res.Status == StatusHit {
		m, err := ParseManifest(rep)
		if err != nil {
			return LookupResult{}, fmt.Errorf("LOOKUP reply: %w", err)
		}
		res.Replicas = &m
	}
	return res, nil
}

// LookupMany answers reads of many items of one tenant (no min_version) in
// one pipelined round trip: out[i] is Lookup's answer for items[i], or
// errs[i] its error. Each key's LOOKUP is the single read's script, so every
// answer (hit, stale, lease) means what Lookup's would. A returned error
// means no answer is known (connection-level).
func (c *Client) LookupMany(ctx context.Context, tenant string, items []string) (out []LookupResult, errs []error, err error) {
	out, errs = make([]LookupResult, len(items)), make([]error, len(items))
	toks := make([]Token, len(items))
	for i := range toks {
		if toks[i], err = newToken(); err != nil {
			return nil, nil, fmt.Errorf("cache: lookup %d items: %w", len(items), err)
		}
	}
	w, reset := c.watermarkArgs()
	sha := c.s.lookup.Hash()
	pending := make([]int, len(items))
	for i := range pending {
		pending[i] = i
	}
	// As InvalidateBatch: go-redis does not retry NOSCRIPT in a pipeline.
	for attempt := 0; len(pending) > 0; attempt++ {
		cmds := make([]*redis.Cmd, len(pending))
		pipe := c.rdb.Pipeline()
		for j, i := range pending {
			cmds[j] = pipe.EvalSha(ctx, sha, []string{c.key(tenant, items[i])},
				0, w, reset, toks[i].String(), c.leaseMs, c.cfg.MaxAge.Milliseconds())
		}
		_, _ = pipe.Exec(ctx) // errors are read per command below
		var noscript []int
		for j, cmd := range cmds {
			i := pending[j]
			r, err := cmd.Slice()
			if err == nil {
				out[i], err = parseLookup(r, toks[i])
			}
			var rerr redis.Error
			switch {
			case err == nil:
				c.m.lookup(out[i].Status).Inc()
			case redis.HasErrorPrefix(err, "NOSCRIPT"):
				noscript = append(noscript, i)
			case errors.As(err, &rerr):
				c.m.lookup("error").Inc()
				errs[i] = fmt.Errorf("cache: lookup %s/%s: %w", tenant, items[i], err)
			default: // connection-level
				c.m.lookup("error").Add(float64(len(pending)))
				return nil, nil, fmt.Errorf("cache: lookup %d items: %w", len(items), err)
			}
		}
		if len(noscript) > 0 && attempt > 0 {
			return nil, nil, fmt.Errorf("cache: lookup %d items: NOSCRIPT after loading scripts", len(items))
		}
		if len(noscript) > 0 {
			if err := c.LoadScripts(ctx); err != nil {
				return nil, nil, fmt.Errorf("cache: lookup %d items: %w", len(items), err)
			}
		}
		pending = noscript
	}
	return out, errs, nil
}
