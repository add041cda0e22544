package reader

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

func (rd *Reader) runAdmissionSizing(ctx context.Context) {
	rd.m.fillRate.Set(rd.admit.effective())
	if rd.cfg.FillRate <= 0 || rd.cfg.FillTurnover <= 0 {
		return
	}
	t := time.NewTicker(admissionSizingEvery)
	defer t.Stop()
	for {
		rd.sizeAdmission(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sizeAdmission sets the admission's cap from the cache tier once.
func (rd *Reader) sizeAdmission(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, admissionSizingEvery/2)
	defer cancel()
	m, err := rd.cache.Memory(ctx)
	if err != nil {
		rd.log.Debug("fill rate not sized to the cache this time", "err", err)
		return
	}
	limit := 0.0
	if n := m.Entries(); n > 0 {
		limit = max(1, float64(n)/rd.cfg.FillTurnover.Seconds()/float64(rd.procs.count()))
	}
	rd.admit.setLimit(limit)
	rd.m.fillRate.Set(rd.admit.effective())
}
