package telemetry

import (
	"context"
	"log/slog"
)

// componentHandler keeps one "component" attribute per record: a logger
// derived from another (the relay's Kafka client from the relay's) names
// the path, "relay.kafka-client", where slog's With would repeat the key,
// which JSON readers resolve differently (the last wins in most, an error
// in some).
type componentHandler struct {
	inner     slog.Handler
	component string // "" until a With names one
}

func (h *componentHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l)
}

func (h *componentHandler) Handle(ctx context.Context, r slog.Record) error {
	if h.component != "" {
		r = r.Clone()
		r.AddAttrs(slog.String("component", h.component))
	}
	return h.inner.Handle(ctx, r)
}

func (h *componentHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := h.component
	rest := make([]slog.Attr, 0, len(attrs))
	for _, a := range attrs {
		if a.Key != "component" {
			rest = append(rest, a)
			continue
		}
		if v := a.Value.Resolve().String(); c == "" {
			c = v
		} else if v != "" {
			c += "." + v
		}
	}
	inner := h.inner
	if len(rest) > 0 {
		inner = inner.WithAttrs(rest)
	}
	return &componentHandler{inner: inner, component: c}
}

// WithGroup puts the component outside the group, where the records of the
// ungrouped logger have it.
func (h *componentHandler) WithGroup(name string) slog.Handler {
	inner := h.inner
	if h.component != "" {
		inner = inner.WithAttrs([]slog.Attr{slog.String("component", h.component)})
	}
	return &componentHandler{inner: inner.WithGroup(name)}
}
