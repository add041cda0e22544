package telemetry_test

import (
	"context"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/telemetry"
	"github.com/tidemark/tidemark/lab/testenv"
)

// With no endpoint in its config, a process traces to the collector the
// OpenTelemetry SDK's own variables name, and its resource carries
// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES (what an OpenTelemetry
// operator or a platform's pod template sets), over tidemark's defaults.
func TestTracingFollowsOTELEnvironment(t *testing.T) {
	o := testenv.StartOTLP(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", o.URL())
	t.Setenv("OTEL_SERVICE_NAME", "catalog-cache-serve")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=staging,k8s.namespace.name=shop,service.name=overridden")
	t.Setenv("OTEL_TRACES_SAMPLER", "always_on")

	tr, err := telemetry.NewTracing(telemetry.DefaultTraceConfig(), testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	if !tr.Enabled() {
		t.Fatal("tracing is off with OTEL_EXPORTER_OTLP_ENDPOINT set")
	}
	ctx := testenv.Context(t, 30*time.Second)
	_, span := telemetry.Tracer(tr.Provider(), "test").Start(ctx, "otel-env")
	if !span.SpanContext().IsSampled() {
		t.Fatal("OTEL_TRACES_SAMPLER=always_on: the span is not sampled")
	}
	span.End()
	if err := tr.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
	got := o.Trace(span.SpanContext().TraceID().String())
	if len(got) != 1 {
		t.Fatalf("the collector received %d spans of the trace, want 1 (all: %+v)", len(got), o.Spans())
	}
	res := got[0].Resource
	for k, want := range map[string]string{"service.name": "catalog-cache-serve", "deployment.environment.name": "staging", "k8s.namespace.name": "shop"} {
		if res[k] != want {
			t.Errorf("resource %s = %q, want %q (resource: %v)", k, res[k], want, res)
		}
	}
	if res["service.version"] == "" || res["telemetry.sdk.name"] != "opentelemetry" {
		t.Errorf("resource lost tidemark's or the SDK's own attributes: %v", res)
	}
	t.Logf("span %s of trace %s arrived at %s with resource %v", got[0].Name, got[0].TraceID, o.URL(), res)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := tr.Run(cctx); err != nil {
		t.Fatal(err)
	}
}
