package api

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/tidemark/tidemark/internal/telemetry"
	"github.com/tidemark/tidemark/reader"
)

// Span and attribute names of a GET's trace. The item ID and the tenant
// are attributes of sampled traces, never metric labels.
const (
	spanGet = "GET /v1/catalog/items/{id}" // its path's spans are package reader's children of it

	attrTenant      = "tidemark.tenant"
	attrItem        = "tidemark.item_id"
	attrMinVersion  = "tidemark.min_version"
	attrCacheStatus = "tidemark.cache_status"
	attrVersion     = "tidemark.version"
)

// startGet starts the span of one GET. A client's traceparent is linked,
// not followed: a parent's sampling decision is obeyed, and a client must
// not be able to have every read traced.
func (s *Server) startGet(r *http.Request, tenant, id string, minVersion int64) (context.Context, trace.Span) {
	if !s.tracing { // no tracer: the request's own context and a span that records nothing
		return r.Context(), noSpan
	}
	ctx, span := s.tracer.Start(r.Context(), spanGet, getSpanOpts...)
	if !span.IsRecording() { // not sampled (or tracing off): nothing more to pay for
		return ctx, span
	}
	span.SetAttributes(attribute.String("http.request.method", http.MethodGet), attribute.String("http.route", "/v1/catalog/items/{id}"),
		attribute.String(attrTenant, tenant), attribute.String(attrItem, id), attribute.Int64(attrMinVersion, minVersion))
	if sc := trace.SpanContextFromContext(telemetry.Propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))); sc.IsValid() {
		span.AddLink(trace.Link{SpanContext: sc})
	}
	return ctx, span
}

// noSpan is the span of a GET while tracing is off: it records nothing.
var noSpan = trace.SpanFromContext(context.Background())

var getSpanOpts = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer), trace.WithNewRoot()}

// endGet records how the GET ended.
func endGet(span trace.Span, rr reader.Result) {
	if !span.IsRecording() {
		return
	}
	code := httpStatus(rr)
	span.SetAttributes(attribute.String(attrCacheStatus, rr.CacheStatus), attribute.Int("http.response.status_code", code))
	if rr.Kind == reader.Found || rr.Kind == reader.BelowMin {
		span.SetAttributes(attribute.Int64(attrVersion, rr.Version))
	}
	if code >= 500 {
		span.SetStatus(codes.Error, rr.CacheStatus)
	}
}

// httpStatus is the status code respondRead answers rr with.
func httpStatus(rr reader.Result) int {
	switch rr.Kind {
	case reader.Found:
		return http.StatusOK
	case reader.NotFound:
		return http.StatusNotFound
	case reader.BelowMin:
		return http.StatusPreconditionFailed
	case reader.BadMinVersion:
		return http.StatusBadRequest
	}
	return http.StatusServiceUnavailable
}
