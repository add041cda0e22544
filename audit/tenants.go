package audit

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tidemark/tidemark/inspect"
	"github.com/tidemark/tidemark/schema"
)

// Tenant estimates: the sweep counts each tenant's cached entries and their
// memory (MEMORY USAGE), and scales the counts by the part of the keyspace
// walked so far. SCAN's order follows the hash table, not the tenant, so a
// partial sweep is a fair sample.

// maxTenantSeries bounds the tenant label: the largest tenants by keys get
// their own series, the rest are summed under "other".
const maxTenantSeries = 20

// maxTenantsCounted bounds the sweep's memory; tenants past it count as
// "other" straight away.
const maxTenantsCounted = 10_000

type tenantCount struct{ keys, bytes float64 }

type sweepState struct {
	started time.Time
	done    map[string]bool
	scanned int64 // item hashes SCAN returned in this sweep
	tenants map[string]*tenantCount
	last    map[string]*tenantCount // the last complete sweep
}

// masterDone (under a.mu) notes that one master's SCAN wrapped around; when all have,
// the sweep is complete and its counts become the estimate.
func (a *Auditor) masterDone(addr string, masters int) {
	s, m := &a.sweep, a.m
	if s.done == nil {
		s.done = map[string]bool{}
	}
	s.done[addr] = true
	if len(s.done) < masters {
		return
	}
	if !s.started.IsZero() {
		m.sweepSeconds.Set(time.Since(s.started).Seconds())
	}
	s.last, s.tenants = s.tenants, map[string]*tenantCount{}
	s.scanned, s.done, s.started = 0, nil, time.Now()
	a.publishTenants(s.last, 1)
}

// sizes adds a round's entries to the sweep and publishes the estimates.
func (a *Auditor) sizes(ctx context.Context, entries []inspect.Entry, scanned int, dbsize int64) error {
	mem := make([]*redis.IntCmd, len(entries))
	if len(entries) > 0 {
		_, err := a.d.Redis.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, e := range entries {
				mem[i] = p.MemoryUsage(ctx, schema.RedisKey(a.cfg.Namespace, e.Tenant, e.Item), 0)
			}
			return nil
		})
		if err != nil && err != redis.Nil {
			return fmt.Errorf("audit: memory usage: %w", err)
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	s := &a.sweep
	if s.started.IsZero() {
		s.started = time.Now()
	}
	s.scanned += int64(scanned)
	for i, e := range entries {
		name := e.Tenant
		if _, ok := s.tenants[name]; !ok && len(s.tenants) >= maxTenantsCounted {
			name = "other"
		}
		tc := s.tenants[name]
		if tc == nil {
			tc = &tenantCount{}
			s.tenants[name] = tc
		}
		tc.keys++
		tc.bytes += float64(mem[i].Val()) // 0 when the key went away meanwhile
	}
	counts, scale := s.tenants, 1.0
	switch {
	case s.last != nil && s.scanned < dbsize/2:
		counts = s.last // a complete sweep says more than a young one
	case s.scanned > 0:
		scale = max(1, float64(dbsize)/float64(s.scanned))
	}
	a.publishTenants(counts, scale)
	return nil
}

func (a *Auditor) publishTenants(counts map[string]*tenantCount, scale float64) {
	names := make([]string, 0, len(counts))
	for n := range counts {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return counts[names[i]].keys > counts[names[j]].keys })
	var other tenantCount
	a.m.tenantKeys.Reset()
	a.m.tenantBytes.Reset()
	for i, n := range names {
		c := counts[n]
		if i >= maxTenantSeries || n == "other" {
			other.keys += c.keys
			other.bytes += c.bytes
			continue
		}
		a.m.tenantKeys.WithLabelValues(n).Set(c.keys * scale)
		a.m.tenantBytes.WithLabelValues(n).Set(c.bytes * scale)
	}
	if other.keys > 0 {
		a.m.tenantKeys.WithLabelValues("other").Set(other.keys * scale)
		a.m.tenantBytes.WithLabelValues("other").Set(other.bytes * scale)
	}
}
