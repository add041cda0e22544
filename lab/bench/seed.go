package bench

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/api"
	"github.com/tidemark/tidemark/lab/seed"
)

// SeedTenant writes items into the catalog at dsn (package seed, through
// one connection) and returns a new API key of their tenant: what a harness
// reads the catalog with through serve.
func SeedTenant(ctx context.Context, dsn string, items seed.Items) (string, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return "", fmt.Errorf("seed tenant %q: %w", items.Tenant, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := items.Insert(ctx, conn); err != nil {
		return "", fmt.Errorf("seed tenant %q: %w", items.Tenant, err)
	}
	key, err := api.CreateAPIKey(ctx, conn, items.Tenant)
	if err != nil {
		return "", fmt.Errorf("seed tenant %q: %w", items.Tenant, err)
	}
	return key, nil
}

// PageItems are the n items the serve and reads harnesses read, item-0 to
// item-<n-1> of tenant, each a product page's display (a name, an image URL
// and 240 bytes of text); a rerun on the same database keeps those present.
func PageItems(tenant string, n int) seed.Items {
	return seed.Items{Tenant: tenant, Prefix: "item-", Count: n, SkipExisting: true,
		Display: "jsonb_build_object('name', 'Item ' || n, 'image', 'https://img.example/' || n || '.jpg', 'text', repeat('lorem ipsum ', 20))"}
}
