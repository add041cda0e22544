package warm

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/tidemark/tidemark/api"
	"github.com/tidemark/tidemark/hotset"
)

// refusalNoise is how many more foreground refusals than usual in one step
// still count as noise, not as a rise.
const refusalNoise = 5

// warmReadTimeout bounds one key's lookup, source read and fill.
const warmReadTimeout = 5 * time.Second

// pace is one step's observations.
type pace struct {
	mu       sync.Mutex
	reads    int
	readTime time.Duration
	refused  int // background budget refusals
}

func (p *pace) take() (reads int, mean time.Duration, refused int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reads > 0 {
		mean = p.readTime / time.Duration(p.reads)
	}
	reads, refused = p.reads, p.refused
	p.reads, p.readTime, p.refused = 0, 0, 0
	return reads, mean, refused
}

// warm fills the hottest keys of req, hottest first, paced.
func (w *Warmer) warm(ctx context.Context, reason string, req Request) {
	w.m.runs.WithLabelValues(reason).Inc()
	start := time.Now()
	var keys []hotset.Hot
	for {
		var err error
		keys, err = hotset.ReadTop(ctx, w.d.Redis, w.cfg.Namespace, req.Top, req.Tenant)
		if err == nil && len(keys) > 0 || time.Since(start) >= w.cfg.HotSetWait || ctx.Err() != nil {
			break
		}
		// A lost node may have held the hot set too: the serve processes
		// re-seed it from their sketches at their next merge.
		t := time.NewTimer(250 * time.Millisecond)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
	log := w.log.With("reason", reason, "tenant", req.Tenant)
	log.Info("warming the hottest keys", "keys", len(keys), "top", req.Top)
	total := len(keys)
	var done, filled atomic.Int64
	w.m.remaining.Set(float64(total))
	cur := w.cfg.StartRate
	lim := rate.NewLimiter(rate.Limit(cur), w.cfg.Workers)
	w.m.rate.Set(cur)
	p := &pace{}
	state := StateRunning
	w.progress(ctx, state, reason, req, total, 0, 0, cur, start)

	jobs := make(chan hotset.Hot)
	var wg sync.WaitGroup
	for range w.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range jobs {
				if w.one(ctx, lim, p, k) == api.WarmFilled {
					filled.Add(1)
				}
				done.Add(1)
				w.m.remaining.Dec()
			}
		}()
	}
	stepDone := make(chan struct{})
	go func() {
		defer close(stepDone)
		t := time.NewTicker(w.cfg.StepEvery)
		defer t.Stop()
		best := time.Duration(0)
		lastRef := w.d.Source.ForegroundRefusals()
		usual := -1.0 // smoothed refusals per step; -1 until the first step
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			case <-w.finished(&done, total):
				return
			}
			reads, mean, refused := p.take()
			ref := w.d.Source.ForegroundRefusals()
			delta := ref - lastRef
			lastRef = ref
			slow := reads > 0 && best > 0 && mean > time.Duration(w.cfg.SlowFactor*float64(best)) && mean > 2*time.Millisecond
			// Foreground refusals right after a loss come from the misses
			// the warmer is there to remove; only rising refusals mean the
			// warmer takes what the foreground needs (in-flight slots,
			// source capacity). Rising is well above the smoothed usual
			// count, so that step-to-step noise does not hold the warmer
			// back.
			rising := usual >= 0 && delta > 1.5*usual+refusalNoise
			if usual < 0 {
				usual = delta
			}
			usual += 0.3 * (delta - usual)
			switch {
			case slow || rising:
				cur = max(cur/2, w.cfg.Step/4)
				state = StateBackingOff
				cause := causeSlow
				if rising {
					cause = causeRefusals
				}
				w.m.backoffs.WithLabelValues(cause).Inc()
				log.Info("warm backing off", "rate", cur, "source_read_mean", mean, "best", best, "foreground_refusals", delta)
			case refused == 0:
				cur = min(w.cfg.MaxRate, cur+w.cfg.Step)
				state = StateRunning
			}
			// The baseline is the best step, forgotten by 10 % a step: a
			// source (or host) that settles at a slower healthy speed
			// becomes the new baseline within seconds, while a step that is
			// suddenly several times slower still reads as slow.
			if reads > 0 && (best == 0 || mean < best*11/10) {
				best = mean
			} else if reads > 0 {
				best = best * 11 / 10
			}
			lim.SetLimit(rate.Limit(cur))
			w.m.rate.Set(cur)
			w.progress(ctx, state, reason, req, total, int(done.Load()), int(filled.Load()), cur, start)
		}
	}()
feed:
	for _, k := range keys {
		select {
		case jobs <- k:
		case <-ctx.Done():
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	<-stepDone
	w.m.remaining.Set(0)
	w.m.rate.Set(0)
	if ctx.Err() != nil {
		// The lease moved (or the process stops): the next holder warms
		// the loss again, from the hottest key.
		w.progress(context.WithoutCancel(ctx), StateInterrupted, reason, req, total, int(done.Load()), int(filled.Load()), 0, start)
		log.Info("warm interrupted", "keys", total, "done", done.Load())
		return
	}
	w.progress(ctx, StateDone, reason, req, total, int(done.Load()), int(filled.Load()), 0, start)
	log.Info("warm finished", "keys", total, "took", time.Since(start).Round(time.Millisecond))
}

// finished is closed when done reaches total (polled by the step loop).
func (w *Warmer) finished(done *atomic.Int64, total int) <-chan struct{} {
	if done.Load() >= int64(total) {
		c := make(chan struct{})
		close(c)
		return c
	}
	return nil
}

// one warms one key. A background budget refusal is retried (the budget is
// the ceiling, not a failure); any other error leaves the key to visitors.
func (w *Warmer) one(ctx context.Context, lim *rate.Limiter, p *pace, k hotset.Hot) api.WarmResult {
	for {
		if err := lim.Wait(ctx); err != nil {
			return ""
		}
		// A read under way finishes even when the lease moves: cancelled, it
		// would leave the key's fill lease taken and unused until it expires.
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), warmReadTimeout)
		out, err := w.d.Source.Warm(wctx, k.Tenant, k.Item)
		cancel()
		switch {
		case err == nil:
			w.m.keys.WithLabelValues(string(out.Result)).Inc()
			if out.Source > 0 {
				p.mu.Lock()
				p.reads++
				p.readTime += out.Source
				p.mu.Unlock()
			}
			return out.Result
		case errors.Is(err, api.ErrBudget):
			p.mu.Lock()
			p.refused++
			p.mu.Unlock()
			w.m.keys.WithLabelValues("refused").Inc()
			t := time.NewTimer(20 * time.Millisecond)
			select {
			case <-ctx.Done():
				t.Stop()
				return ""
			case <-t.C:
			}
		default:
			w.m.keys.WithLabelValues("error").Inc()
			if ctx.Err() == nil {
				w.log.Debug("warm read failed; leaving the key to visitors", "tenant", k.Tenant, "item", k.Item, "err", err)
			}
			return ""
		}
	}
}
