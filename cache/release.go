package cache

import (
	"context"
	"fmt"
)

// Release gives back the fill lease tok that Lookup issued, without filling
// (the caller read the source but decided not to cache the value). Other
// readers of the key then miss and get a lease at once instead of waiting
// for a fill that never comes. It reports whether tok was still the key's
// lease; a token already expired or replaced releases nothing.
func (c *Client) Release(ctx context.Context, tenant, item string, tok Token) (bool, error) {
	if tok.IsZero() {
		return false, nil
	}
	n, err := c.s.release.Run(ctx, c.rdb, []string{c.key(tenant, item)}, tok.String()).Int64()
	if err != nil {
		return false, fmt.Errorf("cache: release %s/%s: %w", tenant, item, err)
	}
	return n == 1, nil
}
