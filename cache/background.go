package cache

import "context"

// backgroundKey marks a context whose lookups are the process's own.
type backgroundKey struct{}

// Background marks ctx's lookups as the process's own (the warmer's
// refills), not a visitor's demand: the hot-set tracker does not count
// them. Counted, a warm run would rank its own keys, and a key it asked
// for again after each budget refusal would climb past hotter ones.
func Background(ctx context.Context) context.Context {
	return context.WithValue(ctx, backgroundKey{}, true)
}

// IsBackground reports whether ctx was marked by Background.
func IsBackground(ctx context.Context) bool {
	b, _ := ctx.Value(backgroundKey{}).(bool)
	return b
}
