// Command readthrough is a service of its own that reads a shop's products
// (shop.products, adopted with `tidemark adopt`, captured and applied by
// tidemark) through the cache tier with package reader, which keeps the
// freshness promise: GET /products/{shop}/{sku}. PG, REDIS and ADDR are
// taken from the environment, and the cache namespace and source pool from
// the variables `tidemark serve` reads (TIDEMARK_NAMESPACE,
// TIDEMARK_SOURCE_POOL) with serve's defaults: the service shares serve's
// source budget against the same Postgres, and a namespace bound to another
// table (serve's catalog.items, say) is refused at start.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/catalog"
	"github.com/tidemark/tidemark/reader"
)

func main() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("PG"))
	must(err)
	rdb, err := cache.ParseRedisURL(os.Getenv("REDIS"))
	must(err)
	ccfg := cache.DefaultConfig()
	if ns := os.Getenv("TIDEMARK_NAMESPACE"); ns != "" {
		ccfg.Namespace = ns
	}
	tier, err := cache.New(ccfg, cache.Deps{Redis: rdb})
	must(err)
	// The watermark vouches only for what capture's markers of this
	// source (server, database, table) say: another deployment's capture
	// left on the same topic vouches for nothing here.
	src, err := catalog.Table{Name: "shop.products"}.Source(ctx, pool)
	must(err)
	tier.SetSource(src)
	go func() { log.Fatal(tier.Run(ctx)) }() // the watermarks the cache judges freshness by
	products := reader.SourceFunc(func(ctx context.Context, shop, sku string) (it reader.Item, err error) {
		err = pool.QueryRow(ctx, `SELECT rev, status = 'live', json_build_object('shop', shop_id, 'sku', sku, 'title', title)
			FROM shop.products WHERE shop_id = $1 AND sku = $2`, shop, sku).Scan(&it.Version, &it.Found, &it.Payload)
		if errors.Is(err, pgx.ErrNoRows) {
			return reader.Item{}, nil
		}
		return it, err
	})
	cfg := reader.DefaultConfig() // its SourcePool: serve's default, one budget per source
	if pool := os.Getenv("TIDEMARK_SOURCE_POOL"); pool != "" {
		cfg.SourcePool = pool
	}
	cfg.Mapping = "shop.products (examples/readthrough)" // the namespace is bound to what the source reads
	rd, err := reader.New(cfg, reader.Deps{Source: products, Cache: tier, Redis: rdb})
	must(err)
	if err := rd.Claim(ctx); errors.Is(err, cache.ErrIdentity) {
		log.Fatal(err) // the namespace is bound to another table (Run claims again if Redis was down)
	}
	go func() { log.Fatal(rd.Run(ctx)) }() // the clock guard, this process's share of the source budget, the identity
	http.HandleFunc("GET /products/{shop}/{sku}", func(w http.ResponseWriter, r *http.Request) {
		res := rd.Get(r.Context(), reader.Query{Tenant: r.PathValue("shop"), Item: r.PathValue("sku")})
		w.Header().Set("Cache-Status", res.CacheStatus)
		switch res.Kind {
		case reader.Found:
			fmt.Fprintf(w, `{"version":%d,"product":%s}`, res.Version, res.Payload)
		case reader.NotFound:
			http.NotFound(w, r)
		default: // the source budget is spent or the source is down
			w.Header().Set("Retry-After", "1")
			http.Error(w, "busy", http.StatusServiceUnavailable)
		}
	})
	log.Fatal(http.ListenAndServe(os.Getenv("ADDR"), nil))
}

func must(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
