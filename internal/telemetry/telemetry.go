// Package telemetry is the observability plumbing every tidemark process
// shares: the slog logger built from a format and a level, and the HTTP
// endpoint serving /metrics, /healthz and /readyz (and whatever a process
// mounts beside them: the status page).
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/lifecycle"
)

// NewLogger builds the process logger. format is "text" or "json"; level is
// debug, info, warn or error. A line carries one "component" key however
// deep the logger was derived (componentHandler). A bad argument is a config.FieldError naming
// "Format" or "Level".
func NewLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, &config.FieldError{Field: "Level", Problem: fmt.Sprintf("%q is not one of debug, info, warn, error", level)}
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch strings.ToLower(format) {
	case "text":
		return slog.New(&componentHandler{inner: slog.NewTextHandler(w, opts)}), nil
	case "json":
		return slog.New(&componentHandler{inner: slog.NewJSONHandler(w, opts)}), nil
	}
	return nil, &config.FieldError{Field: "Format", Problem: fmt.Sprintf("%q is not text or json", format)}
}

// Pipeline names the pipeline a process belongs to. Every series the
// process exports carries it as the labels cache_namespace and topic, so one
// Prometheus tells apart the processes of two namespaces (a namespace
// upgrade runs both) or of two topics. The label is cache_namespace, not
// namespace: Prometheus's Kubernetes discovery already sets namespace to the
// pod's, and a scraped label of that name would be renamed exported_namespace.
type Pipeline struct {
	Namespace string // cache-tier key namespace
	Topic     string // Kafka topic of invalidations
}

func (p Pipeline) labels() prometheus.Labels {
	l := prometheus.Labels{}
	if p.Namespace != "" {
		l["cache_namespace"] = p.Namespace
	}
	if p.Topic != "" {
		l["topic"] = p.Topic
	}
	return l
}

// Registry is the one registry a process exposes: what is registered on it
// carries the pipeline's labels; Gather reads every series.
type Registry struct {
	prometheus.Registerer
	reg *prometheus.Registry
}

// Gather implements prometheus.Gatherer.
func (r *Registry) Gather() ([]*dto.MetricFamily, error) { return r.reg.Gather() }

// NewRegistry returns a registry with the Go and process collectors and
// tidemark_build_info, every series labelled with p.
func NewRegistry(p Pipeline) *Registry {
	reg := prometheus.NewRegistry()
	r := &Registry{Registerer: prometheus.WrapRegistererWith(p.labels(), reg), reg: reg}
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), NewBuildInfoCollector())
	return r
}

// ReadyFunc reports nil when the process is ready to do its job.
type ReadyFunc func(context.Context) error

// Server serves /metrics, /healthz (live funcs all nil) and /readyz (not
// draining and ready funcs all nil), the probes Kubernetes asks: liveness
// restarts a process whose own loops are stuck, readiness takes a process
// out of its Service while it cannot do its job.
type Server struct {
	addr     string
	log      *slog.Logger
	mux      *http.ServeMux
	ready    []ReadyFunc
	live     []ReadyFunc
	draining atomic.Bool
	ln       net.Listener
}

// NewServer listens on addr at once, so a port conflict is reported at start.
// An empty addr disables the endpoint (Run returns when ctx ends).
func NewServer(addr string, g prometheus.Gatherer, log *slog.Logger, ready ...ReadyFunc) (*Server, error) {
	s := &Server{addr: addr, log: log.With("component", "telemetry"), mux: http.NewServeMux(), ready: ready}
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	s.mux.HandleFunc("GET /healthz", s.healthz)
	s.mux.HandleFunc("GET /readyz", s.readyz)
	if addr == "" {
		return s, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("telemetry: listen on %s: %w", addr, err)
	}
	s.ln = ln
	return s, nil
}

// Addr is the address actually listened on ("" when disabled).
func (s *Server) Addr() string {
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Handle mounts h for pattern beside /metrics (the status page at / and
// /status.json). Call it before Run.
func (s *Server) Handle(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

// SetLive sets the checks of /healthz: each says whether one of the
// process's own loops is still making progress (not whether the servers it
// talks to answer: restarting the process would not fix those). Call it
// before Run.
func (s *Server) SetLive(live ...ReadyFunc) { s.live = live }

// Drain makes /readyz fail from now on, so load balancers stop sending new
// work before the process closes its listeners (--shutdown-delay).
func (s *Server) Drain() { s.draining.Store(true) }

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	if err := check(r.Context(), s.live); err != nil {
		http.Error(w, "not alive: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	_, _ = io.WriteString(w, "ok\n")
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() {
		http.Error(w, "not ready: shutting down", http.StatusServiceUnavailable)
		return
	}
	if err := check(r.Context(), s.ready); err != nil {
		http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	_, _ = io.WriteString(w, "ready\n")
}

// check runs fs within 2 s and joins their errors.
func check(ctx context.Context, fs []ReadyFunc) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var errs []error
	for _, f := range fs {
		if err := f(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Run serves until ctx ends, then shuts down within 5 s.
func (s *Server) Run(ctx context.Context) error {
	if s.ln == nil {
		<-ctx.Done()
		return nil
	}
	srv := &http.Server{Handler: s.mux, ReadHeaderTimeout: 5 * time.Second}
	s.log.Info("serving metrics", "addr", s.Addr())
	if err := lifecycle.ServeHTTP(ctx, srv, s.ln, lifecycle.ShutdownGrace); err != nil {
		return fmt.Errorf("telemetry: %w", err)
	}
	return nil
}
