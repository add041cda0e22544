package api

import (
	"context"
	"time"
)

// Admission sized from the cache itself. A fixed fill rate is right for one
// cache size only: the product default (2,000 fills/s per process) turns a
// small cache over every few seconds and so never holds a scanning tenant
// back. Every admissionSizingEvery the process reads the tier's maxmemory,
// used memory and key count, estimates how many entries fit (keys x
// maxmemory / used), and caps its rate so that all live serve processes
// together refill the whole cache no faster than once per FillTurnover.
// Without maxmemory, or while the tier cannot be asked, the last cap (or
// FillRate alone) stays.

const admissionSizingEvery = 10 * time.Second

func (s *Server) runAdmissionSizing(ctx context.Context) {
	s.m.fillRate.Set(s.admit.effective())
	if s.cfg.FillRate <= 0 || s.cfg.FillTurnover <= 0 {
		return
	}
	t := time.NewTicker(admissionSizingEvery)
	defer t.Stop()
	for {
		s.sizeAdmission(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sizeAdmission sets the admission's cap from the cache tier once.
func (s *Server) sizeAdmission(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, admissionSizingEvery/2)
	defer cancel()
	m, err := s.cache.Memory(ctx)
	if err != nil {
		s.log.Debug("fill rate not sized to the cache this time", "err", err)
		return
	}
	limit := 0.0
	if n := m.Entries(); n > 0 {
		limit = max(1, float64(n)/s.cfg.FillTurnover.Seconds()/float64(s.procs.count()))
	}
	s.admit.setLimit(limit)
	s.m.fillRate.Set(s.admit.effective())
}
