package applier

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kotel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/tidemark/tidemark/internal/telemetry"
)

// traceHeader is the W3C header capture puts on a sampled change's record.
const traceHeader = "traceparent"

// traced reports whether rec continues a sampled trace (cheap: most
// records carry no header at all).
func traced(rec *kgo.Record) bool {
	for _, h := range rec.Headers {
		if h.Key == traceHeader {
			return true
		}
	}
	return false
}

// traceApplied records, for each record of pk that continues a trace, the
// span of its application ("apply.change", the consumer side of the
// record) and its child "cache.INVALIDATE", the batched call that carried
// its key, from start to now, with the outcome.
func (p *processor) traceApplied(partition int32, pk *pendingKey, result string, batchSize int, start, now time.Time) {
	if p.tracer == nil {
		return
	}
	for _, pr := range pk.recs {
		if !traced(pr.rec) {
			continue
		}
		ctx := telemetry.Propagator.Extract(context.Background(), kotel.NewRecordCarrier(pr.rec))
		if !trace.SpanContextFromContext(ctx).IsSampled() {
			continue
		}
		ctx, apply := p.tracer.Start(ctx, "apply.change", trace.WithSpanKind(trace.SpanKindConsumer), trace.WithTimestamp(start),
			trace.WithAttributes(attribute.String("messaging.system", "kafka"), attribute.Int("messaging.destination.partition.id", int(partition)),
				attribute.Int64("messaging.kafka.offset", pr.rec.Offset), attribute.String("tidemark.tenant", pk.inv.Tenant),
				attribute.String("tidemark.item_id", pk.inv.Item), attribute.Int64("tidemark.version", pr.version)))
		_, inv := p.tracer.Start(ctx, "cache.INVALIDATE", trace.WithSpanKind(trace.SpanKindClient), trace.WithTimestamp(start),
			trace.WithAttributes(attribute.String("db.system.name", "redis"), attribute.String("tidemark.item_id", pk.inv.Item),
				attribute.Int64("tidemark.version", pk.inv.Version), attribute.String("tidemark.result", result),
				attribute.Int("tidemark.batch_size", batchSize)))
		inv.End(trace.WithTimestamp(now))
		apply.SetAttributes(attribute.String("tidemark.result", p.recordResult(pr, pk, result)))
		apply.End(trace.WithTimestamp(now))
	}
}

// recordResult is what pr's record counted as (applyBatch's rule): the
// key's result for the first record of its final version, duplicate or
// older for the others.
func (p *processor) recordResult(pr pendingRec, pk *pendingKey, result string) string {
	for _, o := range pk.recs {
		if o.version == pk.inv.Version {
			if o.rec == pr.rec {
				return result
			}
			if pr.version == pk.inv.Version {
				return resultDuplicate
			}
			break
		}
	}
	if pr.version == pk.inv.Version {
		return result
	}
	return resultOlder
}
