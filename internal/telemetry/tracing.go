package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	sdkresource "go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/tidemark/tidemark/internal/config"
)

// TraceConfig is where a process sends its sampled traces (OTLP over
// HTTP, to a collector) and how many it keeps. Tracing is off unless an
// endpoint is given, here or in the OpenTelemetry SDK's own environment
// variables (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT).
type TraceConfig struct {
	// Endpoint is the collector's OTLP/HTTP URL (http://collector:4318;
	// spans are posted to /v1/traces under it); empty: the SDK's
	// environment variables, and no tracing when they name none either.
	Endpoint string
	// SampleRatio is the share (0-1) of new traces kept: a GET without a
	// sampled traceparent, a change capture reads. A span with a traced
	// parent (an applied change, a GET from a traced client) follows the
	// parent's decision, so a trace is kept whole or not at all.
	// OTEL_TRACES_SAMPLER, when set, replaces it (the SDK reads it).
	SampleRatio float64
	// Service is the resource's service.name (tidemark-serve...);
	// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override the resource's
	// attributes, as the SDK's resource detection has it.
	Service string
	// Pipeline is recorded as resource attributes beside the build.
	Pipeline Pipeline
	// BatchTimeout is the longest a finished span waits to be exported.
	BatchTimeout time.Duration
}

// DefaultTraceConfig keeps one trace in a hundred once an endpoint is set.
func DefaultTraceConfig() TraceConfig {
	return TraceConfig{SampleRatio: 0.01, Service: "tidemark", BatchTimeout: 2 * time.Second}
}

// Validate reports every problem at once, one config.FieldError per field.
func (c TraceConfig) Validate() error {
	var p config.Problems
	if c.Endpoint != "" {
		u, err := url.Parse(c.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			p.Add("Endpoint", "must be an http:// or https:// URL of an OTLP/HTTP collector (got %q)", c.Endpoint)
		}
	}
	if c.SampleRatio < 0 || c.SampleRatio > 1 {
		p.Add("SampleRatio", "must be between 0 and 1 (got %v)", c.SampleRatio)
	}
	if c.BatchTimeout <= 0 {
		p.Add("BatchTimeout", "must be positive (got %s)", c.BatchTimeout)
	}
	return p.Err()
}

// Propagator is how trace context travels between tidemark's processes:
// W3C traceparent in HTTP request headers and in Kafka record headers.
var Propagator propagation.TextMapPropagator = propagation.TraceContext{}

// Tracing is a process's tracer provider: spans batched to the collector,
// or a no-op provider when tracing is off (nothing is recorded or sent).
type Tracing struct {
	provider trace.TracerProvider
	sdk      *sdktrace.TracerProvider // nil when off
	log      *slog.Logger
}

// NewTracing builds the provider; the exporter connects lazily, so an
// unreachable collector only costs dropped spans (counted in the log), never
// a request.
func NewTracing(cfg TraceConfig, log *slog.Logger) (*Tracing, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := &Tracing{provider: noop.NewTracerProvider(), log: log.With("component", "tracing")}
	var opts []otlptracehttp.Option // none: the SDK reads OTEL_EXPORTER_OTLP_* itself
	switch {
	case cfg.Endpoint != "":
		opts = append(opts, otlptracehttp.WithEndpointURL(endpointURL(cfg.Endpoint)))
	case !envEndpoint():
		return t, nil
	}
	exp, err := otlptracehttp.New(context.Background(), opts...)
	if err != nil {
		return nil, fmt.Errorf("telemetry: OTLP exporter: %w", err)
	}
	b := BuildInfo()
	attrs := []attribute.KeyValue{semconv.ServiceName(cfg.Service), semconv.ServiceVersion(b.Version),
		attribute.String("vcs.revision", b.Revision)}
	if cfg.Pipeline.Namespace != "" {
		attrs = append(attrs, attribute.String("tidemark.cache_namespace", cfg.Pipeline.Namespace))
	}
	if cfg.Pipeline.Topic != "" {
		attrs = append(attrs, attribute.String("tidemark.topic", cfg.Pipeline.Topic))
	}
	// The environment's attributes come last, so they win over ours
	// (OTEL_SERVICE_NAME over OTEL_RESOURCE_ATTRIBUTES' service.name).
	res, err := sdkresource.New(context.Background(), sdkresource.WithSchemaURL(semconv.SchemaURL),
		sdkresource.WithTelemetrySDK(), sdkresource.WithAttributes(attrs...), sdkresource.WithFromEnv())
	if err != nil {
		return nil, fmt.Errorf("telemetry: trace resource (OTEL_RESOURCE_ATTRIBUTES): %w", err)
	}
	popts := []sdktrace.TracerProviderOption{
		sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(cfg.BatchTimeout)),
		sdktrace.WithResource(res),
	}
	if _, ok := os.LookupEnv("OTEL_TRACES_SAMPLER"); !ok {
		popts = append(popts, sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SampleRatio))))
	}
	t.sdk = sdktrace.NewTracerProvider(popts...)
	t.provider = t.sdk
	// The SDK reports export failures through the global handler.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { t.log.Warn("trace export failed", "err", err) }))
	return t, nil
}

// envEndpoint says whether the SDK's environment names a collector.
func envEndpoint() bool {
	for _, v := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
		if os.Getenv(v) != "" {
			return true
		}
	}
	return false
}

// Enabled says whether spans are recorded and exported.
func (t *Tracing) Enabled() bool { return t.sdk != nil }

// endpointURL is the collector URL with the OTLP traces path, unless the
// URL already names a path.
func endpointURL(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Path != "" && u.Path != "/") {
		return endpoint
	}
	u.Path = "/v1/traces"
	return u.String()
}

// Provider is what stages take (their Deps.Tracer).
func (t *Tracing) Provider() trace.TracerProvider { return t.provider }

// ForceFlush exports every finished span now.
func (t *Tracing) ForceFlush(ctx context.Context) error {
	if t.sdk == nil {
		return nil
	}
	return t.sdk.ForceFlush(ctx)
}

// Run waits for ctx to end, then exports what is left (within 5 s) and
// stops the provider.
func (t *Tracing) Run(ctx context.Context) error {
	<-ctx.Done()
	if t.sdk == nil {
		return nil
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := t.sdk.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("telemetry: tracing shutdown: %w", err)
	}
	return nil
}

// Tracer is tp's tracer for a package, or a no-op one when tp is nil.
func Tracer(tp trace.TracerProvider, pkg string) trace.Tracer {
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	return tp.Tracer("github.com/tidemark/tidemark/" + pkg)
}
