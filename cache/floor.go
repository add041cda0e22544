package cache

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/tidemark/tidemark/schema"
)

// Floor returns the newest version of (tenant, item) the cache tier knows the
// source has reached (0: none known). It bounds what a reader may ask for
// with min_version.
func (c *Client) Floor(ctx context.Context, tenant, item string) (int64, error) {
	s, err := c.rdb.HGet(ctx, c.key(tenant, item), schema.FieldFloor).Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("cache: floor %s/%s: %w", tenant, item, err)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("cache: floor %s/%s: %q is not a version", tenant, item, s)
	}
	return n, nil
}
