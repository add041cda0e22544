package telemetry

import (
	"context"
	"strings"
	"testing"
)

// Tracing is off without an endpoint (nothing is recorded), a bad endpoint
// or ratio is refused by field, and a collector's base URL gets the OTLP
// traces path.
func TestTraceConfig(t *testing.T) {
	off, err := NewTracing(DefaultTraceConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, span := Tracer(off.Provider(), "test").Start(context.Background(), "x"); span.IsRecording() || span.SpanContext().IsValid() {
		t.Fatal("tracing without an endpoint recorded a span")
	}
	bad := DefaultTraceConfig()
	bad.Endpoint, bad.SampleRatio = "collector:4318", 1.5
	err = bad.Validate()
	if err == nil || !strings.Contains(err.Error(), "Endpoint") || !strings.Contains(err.Error(), "SampleRatio") {
		t.Fatalf("Validate: %v, want Endpoint and SampleRatio refused", err)
	}
	for in, want := range map[string]string{
		"http://collector:4318":         "http://collector:4318/v1/traces",
		"https://collector:4318/":       "https://collector:4318/v1/traces",
		"http://gateway/otlp/v1/traces": "http://gateway/otlp/v1/traces",
	} {
		if got := endpointURL(in); got != want {
			t.Errorf("endpointURL(%q) = %q, want %q", in, got, want)
		}
	}
}
