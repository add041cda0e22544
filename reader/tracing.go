package reader

import (
	"context"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Span and attribute names of a read's path under the caller's span (the
// GET's, in tidemark serve). The item ID and the tenant are attributes of
// sampled traces, never metric labels.
const (
	spanLookup    = "cache.lookup"
	spanLeaseWait = "lease.wait"
	spanSource    = "source.read"
	spanFill      = "cache.fill"

	attrVersion = "tidemark.version"
	attrLookup  = "tidemark.lookup"
	attrClass   = "tidemark.budget_class"
	attrStored  = "tidemark.stored"
	attrShared  = "tidemark.shared"
)

// child starts a client span of a read's path under ctx's span; none (a
// no-op span) when the read is not traced.
func (rd *Reader) child(ctx context.Context, name string) trace.Span {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return parent // non-recording: every call on it is a no-op
	}
	_, span := rd.tracer.Start(ctx, name, childSpanOpts...)
	return span
}

var childSpanOpts = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}

// fail marks span failed with err.
func fail(span trace.Span, err error) {
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
}
