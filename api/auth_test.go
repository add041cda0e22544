package api

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark/tidemark/lab/testenv"
)

// junkKey is a well-formed key nobody issued.
func junkKey() string {
	var b [32]byte
	rand.Read(b[:])
	return keyPrefix + base64.RawURLEncoding.EncodeToString(b[:])
}

// flood resolves well-formed unknown keys on 4 goroutines, as fast as the
// server's own key check runs them (what a flood of requests reaches),
// until stop is closed, and reports how many it sent.
func flood(in *instance, stop <-chan struct{}) func() int64 {
	var n atomic.Int64
	var wg sync.WaitGroup
	junk := make([]string, 50000) // made beforehand: the flood is key checks, not key making
	for i := range junk {
		junk[i] = "Bearer " + junkKey()
	}
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; ; i += 4 {
				select {
				case <-stop:
					return
				default:
				}
				_, _ = in.srv.auth.tenant(context.Background(), junk[i%len(junk)])
				n.Add(1)
			}
		}()
	}
	return func() int64 { wg.Wait(); return n.Load() }
}

// TestJunkKeysDoNotStarveGoodKeys: a flood of unknown (well-formed) keys
// spends the key lookups' rate, and with one limiter for every lookup a
// good key whose answer is due again, or one this process never saw (a
// restarted serve), got 503 for as long as the flood lasted. Good keys
// must keep getting 200.
func TestJunkKeysDoNotStarveGoodKeys(t *testing.T) {
	e := newEnv(t)
	in := e.instance(instOpts{cfg: func(c *Config) { c.AuthTTL = time.Second }})
	seen := e.apiKey("acme")
	var fresh []string // keys this process has not resolved yet, as after a restart
	for range 20 {
		fresh = append(fresh, e.apiKey("beta"))
	}
	if r := e.do("POST", in.url+"/v1/catalog/items", seen, `{"item_id":"x","display":{"name":"X"}}`); r.code != 201 {
		t.Fatalf("create: %d %s", r.code, r.raw)
	}
	testenv.Eventually(t, 10*time.Second, "the key table read", func() error {
		if tb := in.srv.auth.table.Load(); tb == nil || len(tb.tenants) < 21 {
			return fmt.Errorf("key table %v", tb)
		}
		return nil
	})
	stop := make(chan struct{})
	junk := flood(in, stop)
	time.Sleep(300 * time.Millisecond) // the flood has spent the unknown keys' burst
	var bad []string
	deadline := time.Now().Add(4 * time.Second) // four AuthTTLs: seen is re-checked during the flood
	for i := 0; time.Now().Before(deadline); i++ {
		if r := e.do("GET", in.item("x"), seen, ""); r.code != 200 {
			bad = append(bad, fmt.Sprintf("seen key: %d %s", r.code, r.raw))
		}
		if i < len(fresh) {
			if r := e.do("GET", in.item("x"), fresh[i], ""); r.code != 404 {
				bad = append(bad, fmt.Sprintf("fresh key: %d %s (want 404: its tenant has no item x)", r.code, r.raw))
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	close(stop)
	n := junk()
	if len(bad) > 0 {
		t.Fatalf("during a flood of %d unknown keys, good keys were refused %d times, e.g. %s", n, len(bad), bad[0])
	}
	if n < 10000 {
		t.Fatalf("the flood sent only %d keys: it did not keep the lookups over their rate", n)
	}
	t.Logf("%d junk requests; good keys always answered", n)
}

// TestRevokedKeyStopsWithinTTL: a key deleted from tidemark.api_keys stops
// working within about one AuthTTL, also while unknown keys keep the key
// lookups over their rate: before each check of the revoked key the lookup
// rate is spent on junk (which used to leave the key working on its cached
// answer for AuthStale, 10 minutes).
func TestRevokedKeyStopsWithinTTL(t *testing.T) {
	e := newEnv(t)
	in := e.instance(instOpts{cfg: func(c *Config) { c.AuthTTL = time.Second }})
	key := e.apiKey("acme")
	ctx := context.Background()
	if tenant, err := in.srv.auth.tenant(ctx, "Bearer "+key); err != nil || tenant != "acme" {
		t.Fatalf("before revocation: %q %v", tenant, err)
	}
	testenv.Eventually(t, 10*time.Second, "the key table read", func() error {
		if tb := in.srv.auth.table.Load(); tb == nil || len(tb.tenants) < 1 {
			return fmt.Errorf("key table %v", tb)
		}
		return nil
	})
	junk := make([]string, 0, 20000)
	for range cap(junk) {
		junk = append(junk, "Bearer "+junkKey())
	}
	e.exec(`DELETE FROM tidemark.api_keys WHERE tenant_id = 'acme'`)
	revoked := time.Now()
	for j := 0; ; j += 100 {
		for _, k := range junk[j%len(junk) : j%len(junk)+100] { // spend the lookup rate and burst
			_, _ = in.srv.auth.tenant(ctx, k)
		}
		tenant, err := in.srv.auth.tenant(ctx, "Bearer "+key)
		if err != nil {
			t.Logf("revoked key refused %s after its deletion: %v", time.Since(revoked).Round(10*time.Millisecond), err)
			break
		}
		if time.Since(revoked) > 4*time.Second {
			t.Fatalf("revoked key still resolves to %q %s after its deletion (AuthTTL 1s): want it refused within about one AuthTTL",
				tenant, time.Since(revoked).Round(10*time.Millisecond))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
