package reader

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/schema"
)

// Two readers of different tables in one namespace (issue 36, item 4):
// whichever claims the namespace second is refused with both mappings
// named, answers its reads from its own source with nothing taken from or
// put into the cache (detail=identity), and its Run stops with the error.
// A reader of another source pool is refused the same way. A record lost
// with its Redis node is claimed again by the readers still running.
func TestReaderOfAnotherMappingIsRefusedTheNamespace(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	ctx := testenv.Context(t, time.Minute)
	source := func(payload string) Source {
		return SourceFunc(func(context.Context, string, string) (Item, error) {
			return Item{Found: true, Version: 1, Payload: []byte(payload)}, nil
		})
	}
	products := newTestReaderOf(t, rdb, source(`"products' row"`), func(c *Config) { c.Mapping = "shop.products#aaa" }, nil)
	items := newTestReaderOf(t, rdb, source(`"items' row"`), func(c *Config) { c.Mapping = "catalog.items#bbb" }, nil)
	otherPool := newTestReaderOf(t, rdb, source(`"products' row"`), func(c *Config) { c.Mapping, c.SourcePool = "shop.products#aaa", "elsewhere" }, nil)

	if err := products.IdentityErr(); !errors.Is(err, ErrNotClaimed) {
		t.Fatalf("before any claim IdentityErr = %v, want ErrNotClaimed (a serve is not ready yet)", err)
	}
	if err := products.Claim(ctx); err != nil {
		t.Fatalf("want the first reader to claim the namespace, got %v", err)
	}
	if err := products.IdentityErr(); err != nil {
		t.Fatalf("after its claim IdentityErr = %v, want nil", err)
	}
	q := Query{Tenant: "acme", Item: "sku-7"}
	products.Get(ctx, q) // fills the cache with the products' row
	if r := products.Get(ctx, q); !strings.Contains(r.CacheStatus, "hit") {
		t.Fatalf("want the products' row cached, got %+v", r)
	}

	err := items.Claim(ctx)
	if !errors.Is(err, cache.ErrIdentity) {
		t.Fatalf("want a reader of catalog.items refused the namespace bound to shop.products, got %v", err)
	}
	if ierr := items.IdentityErr(); !errors.Is(ierr, cache.ErrIdentity) {
		t.Errorf("after its refusal IdentityErr = %v, want the refusal (a serve is never ready)", ierr)
	}
	for _, want := range []string{"shop.products#aaa", "catalog.items#bbb", `namespace "catalog"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("want the refusal to name %s, got %v", want, err)
		}
	}
	if r := items.Get(ctx, q); string(r.Payload) != `"items' row"` || !strings.Contains(r.CacheStatus, "detail=identity") {
		t.Errorf("want the refused reader to answer its own source's row, detail=identity, got %s %q", r.CacheStatus, r.Payload)
	}
	// A batch read is refused the cache as Get is (not the products' row
	// from L1 or the pipelined lookup).
	for _, r := range items.GetMany(ctx, "acme", []string{"sku-7", "sku-8"}, 0) {
		if string(r.Payload) != `"items' row"` || !strings.Contains(r.CacheStatus, "detail=identity") {
			t.Errorf("want the refused reader's batch to answer its own source's rows, detail=identity, got %s %q", r.CacheStatus, r.Payload)
		}
	}
	runErr := make(chan error, 1)
	go func() { runErr <- items.Run(ctx) }()
	select {
	case err := <-runErr:
		if !errors.Is(err, cache.ErrIdentity) {
			t.Errorf("want the refused reader's Run to return the refusal, got %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("want the refused reader's Run to return at once, still running after 10 s")
	}
	if err := otherPool.Claim(ctx); !errors.Is(err, cache.ErrIdentity) || !strings.Contains(err.Error(), "elsewhere") {
		t.Errorf("want a reader of another source pool refused, got %v", err)
	}

	// The record lost (a flush, a restore): the running reader claims it
	// again, and the other mapping stays refused.
	if err := rdb.Del(ctx, schema.IdentityKey("catalog")).Err(); err != nil {
		t.Fatal(err)
	}
	if err := products.Claim(ctx); err != nil {
		t.Fatalf("want the record claimed again, got %v", err)
	}
	if err := newTestReaderOf(t, rdb, source("x"), func(c *Config) { c.Mapping = "catalog.items#bbb" }, nil).Claim(ctx); !errors.Is(err, cache.ErrIdentity) {
		t.Errorf("want a new reader of catalog.items refused after the record was claimed again, got %v", err)
	}
}

// A reader's configuration names its mapping: there is no default that two
// tables could share.
func TestReaderConfigNeedsAMapping(t *testing.T) {
	err := DefaultConfig().Validate()
	if err == nil || !strings.Contains(err.Error(), "Mapping") {
		t.Errorf("want DefaultConfig refused without a Mapping, got %v", err)
	}
}
