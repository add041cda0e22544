package api

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"tidemark/internal/telemetry"
)

// Span and attribute names of a GET's trace. The item ID and the tenant
// are attributes of sampled traces, never metric labels.
const (
	spanGet       = "GET /v1/catalog/items/{id}"
	spanLookup    = "cache.lookup"
	spanLeaseWait = "lease.wait"
	spanSource    = "source.read"
	spanFill      = "cache.fill"

	attrTenant      = "tidemark.tenant"
	attrItem        = "tidemark.item_id"
	attrMinVersion  = "tidemark.min_version"
	attrCacheStatus = "tidemark.cache_status"
	attrVersion     = "tidemark.version"
	attrLookup      = "tidemark.lookup"
	attrClass       = "tidemark.budget_class"
	attrStored      = "tidemark.stored"
	attrShared      = "tidemark.shared"
)

// startGet starts the span of one GET. A client's traceparent is linked,
// not followed: a parent's sampling decision is obeyed, and a client must
// not be able to have every read traced.
func (s *Server) startGet(r *http.Request, tenant, id string, minVersion int64) (context.Context, trace.Span) {
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

var getSpanOpts = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer), trace.WithNewRoot()}

// endGet records how the GET ended.
func endGet(span trace.Span, rr readResult) {
	if !span.IsRecording() {
		return
	}
	code := rr.httpStatus()
	span.SetAttributes(attribute.String(attrCacheStatus, rr.cacheStatus), attribute.Int("http.response.status_code", code))
	if rr.kind == readItem || rr.kind == readBelowMin {
		span.SetAttributes(attribute.Int64(attrVersion, rr.version))
	}
	if code >= 500 {
		span.SetStatus(codes.Error, rr.cacheStatus)
	}
}

// httpStatus is the status code respondRead answers rr with.
func (rr readResult) httpStatus() int {
	switch rr.kind {
	case readItem:
		return http.StatusOK
	case readNotFound:
		return http.StatusNotFound
	case readBelowMin:
		return http.StatusPreconditionFailed
	case readBadMinVersion:
		return http.StatusBadRequest
	}
	return http.StatusServiceUnavailable
}

// child starts a client span of a GET's path under ctx's span; none
// (a no-op span) when the GET is not traced.
func (s *Server) child(ctx context.Context, name string) trace.Span {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return parent // non-recording: every call on it is a no-op
	}
	_, span := s.tracer.Start(ctx, name, childSpanOpts...)
	return span
}

var childSpanOpts = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}

// fail marks span failed with err.
func fail(span trace.Span, err error) {
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
}
