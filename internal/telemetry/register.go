package telemetry

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Instruments creates a package's collectors and registers each one on the
// injected Registerer as it is made, so a package's metrics struct is a list
// of names, help texts and labels, and Err reports every registration that
// failed. A nil Registerer registers nothing (the collectors still work).
type Instruments struct {
	reg       prometheus.Registerer
	exclusive bool
	err       error
}

// NewInstruments registers on reg and shares: a collector already registered
// there under the same name is returned instead of the new one, so packages
// that share one registry in a process (API, cache client, applier, replay)
// share their series.
func NewInstruments(reg prometheus.Registerer) *Instruments {
	return &Instruments{reg: reg}
}

// NewExclusiveInstruments registers on reg and does not share: a name already
// registered there is an error, for the stages a process runs once. After the
// first error it registers nothing more, so Err is that one error.
func NewExclusiveInstruments(reg prometheus.Registerer) *Instruments {
	return &Instruments{reg: reg, exclusive: true}
}

// Err is every registration error so far, joined (nil when all succeeded).
func (in *Instruments) Err() error { return in.err }

// Counter makes and registers a counter.
func (in *Instruments) Counter(name, help string) prometheus.Counter {
	return register(in, prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help}))
}

// CounterVec makes and registers a counter with labels.
func (in *Instruments) CounterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return register(in, prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels))
}

// Gauge makes and registers a gauge.
func (in *Instruments) Gauge(name, help string) prometheus.Gauge {
	return register(in, prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help}))
}

// GaugeVec makes and registers a gauge with labels.
func (in *Instruments) GaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return register(in, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels))
}

// GaugeFunc makes and registers a gauge whose value f reports at scrape time.
func (in *Instruments) GaugeFunc(name, help string, f func() float64) prometheus.GaugeFunc {
	return register(in, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f))
}

// Histogram makes and registers a histogram with the given buckets.
func (in *Instruments) Histogram(name, help string, buckets []float64) prometheus.Histogram {
	return register(in, prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}))
}

// HistogramVec makes and registers a histogram with labels.
func (in *Instruments) HistogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return register(in, prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels))
}

// register registers c on in's Registerer and returns it, or (when in
// shares) the collector of the same type already registered under its name.
// Any other error is joined into in.err and c is returned.
func register[C prometheus.Collector](in *Instruments, c C) C {
	if in.reg == nil || (in.exclusive && in.err != nil) {
		return c
	}
	err := in.reg.Register(c)
	if err == nil {
		return c
	}
	var are prometheus.AlreadyRegisteredError
	if !in.exclusive && errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
	}
	in.err = errors.Join(in.err, err)
	return c
}

// The freshness watermark's age, exported under one name and help by every
// role that reads W (the applier as it raises it, serve's cache client as
// it polls it), so the freshness alerts and their absent() rule see it
// while any of them is scraped; one registry holding both shares it.
const (
	WatermarkAgeName = "tidemark_watermark_age_seconds"
	WatermarkAgeHelp = "Age of the global watermark W (min over partitions) as last read by this process: the bound on the oldest pending event age (+Inf when unknown)."
)
