// Package lifecycle is how a tidemark process runs its parts: one Group of
// actors that start together and stop in a fixed order, and ServeHTTP, the
// one serve-then-shut-down-gracefully loop of the process's HTTP servers.
//
// The model is Prometheus's run.Group (github.com/oklog/run): the first actor
// to return, or the end of the caller's context, stops the group. Unlike
// run.Group, actors are not interrupted all at once but phase by phase, in
// the order of the data flow's reverse (docs/design.md, "Lifecycle and
// shutdown order"), so nothing is lost between two stages:
//
//  1. Requests: the API and what works on its behalf (auditor, warmer,
//     replica builder): no new requests, no new source reads;
//  2. Capture: stop reading WAL, flush the relay, confirm what Kafka holds;
//  3. Apply: finish applying, commit what was applied;
//  4. Cache: the cache client's watermark poller, the hot-set merge, the
//     clock guard;
//  5. Observe: the status page's sampler;
//  6. Telemetry: /metrics, /healthz, /readyz, last, so the shutdown stays
//     observable.
//
// Each phase is stopped (its actors' contexts cancelled) only once every
// actor of the phases before it has returned. What uses a process's API
// from outside the group (tidemark-lab dev's demo load) stops before the group.
//
// A group of services (RunServices: serve, apply, capture, dev) treats an
// actor that returns by itself, even with nil, as a failure: a server that
// quietly stops serving must not make the process exit 0. A group of jobs
// (Run: replay) ends when its job does.
package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"slices"
)

// Phase says when an actor stops; lower phases stop first.
type Phase int

// The shutdown order. docs/design.md's lifecycle section says why.
const (
	Requests Phase = iota
	Capture
	Apply
	Cache
	Observe
	Telemetry
)

// Group is a set of actors run together. The zero value is ready to use; a
// Group runs once.
type Group struct {
	actors []actor
}

type actor struct {
	phase Phase
	name  string
	run   func(context.Context) error
}

// Add registers an actor; name is for reading the code and logs (the
// packages' errors already say where they come from). run must return soon
// after its context ends.
func (g *Group) Add(phase Phase, name string, run func(context.Context) error) {
	g.actors = append(g.actors, actor{phase: phase, name: name, run: run})
}

// Run starts every actor and waits until ctx ends or an actor returns, then
// stops the actors phase by phase and waits for all of them. It returns the
// errors of the actors, joined; an actor returning
// context.Canceled because it was stopped is not an error. An actor that
// returns nil before the group stops (a finished job) stops the group
// without an error.
func (g *Group) Run(ctx context.Context) error { return g.run(ctx, false) }

// ErrStopped is the error of a service that returned before it was stopped.
var ErrStopped = errors.New("stopped unexpectedly")

// RunServices is Run for a group of services: an actor that returns before
// it is stopped, even with nil, is an error, "<name>: stopped unexpectedly"
// (ErrStopped) when it returned nil.
func (g *Group) RunServices(ctx context.Context) error { return g.run(ctx, true) }

func (g *Group) run(ctx context.Context, services bool) error {
	type result struct {
		i   int
		err error
	}
	results := make(chan result, len(g.actors))
	cancels := make([]context.CancelFunc, len(g.actors))
	done := make([]chan struct{}, len(g.actors))
	base := context.WithoutCancel(ctx) // values, not the deadline: each actor is stopped in its turn
	for i, a := range g.actors {
		actx, cancel := context.WithCancel(base)
		cancels[i], done[i] = cancel, make(chan struct{})
		go func() {
			defer close(done[i])
			err := a.run(actx)
			if services && actx.Err() == nil {
				if err == nil {
					err = ErrStopped
				}
				err = fmt.Errorf("%s: %w", a.name, err)
			}
			results <- result{i, err}
		}()
	}
	errs := make([]error, len(g.actors)) // written by this goroutine only
	record := func(r result) {
		if r.err != nil && !errors.Is(r.err, context.Canceled) {
			errs[r.i] = r.err
		}
	}
	if len(g.actors) > 0 {
		select {
		case <-ctx.Done():
		case r := <-results:
			record(r)
		}
	}
	phases := make([]Phase, 0, len(g.actors))
	for _, a := range g.actors {
		phases = append(phases, a.phase)
	}
	slices.Sort(phases)
	for _, p := range slices.Compact(phases) {
		for i, a := range g.actors {
			if a.phase == p {
				cancels[i]()
			}
		}
		for i, a := range g.actors {
			if a.phase == p {
				<-done[i]
			}
		}
	}
	close(results)
	for r := range results {
		record(r)
	}
	return errors.Join(errs...)
}
