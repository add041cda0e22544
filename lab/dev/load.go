package dev

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// loadGen plays merchants and visitors against the API: 1 request in 10 is a
// merchant PATCH of a random item, the rest are visitor GETs of zipf-chosen
// items (a few hot items take most reads, as in a real catalog).
type loadGen struct {
	base  string
	keys  []apiKey
	rps   float64
	log   *slog.Logger
	http  *http.Client
	reads atomic.Int64
	hits  atomic.Int64
	upds  atomic.Int64
	errs  atomic.Int64

	mu       sync.Mutex
	versions map[string]int64 // tenant/item -> last version seen
}

func newLoadGen(base string, keys []apiKey, rps float64, log *slog.Logger) *loadGen {
	return &loadGen{base: base, keys: keys, rps: rps, log: log.With("component", "demo-load"),
		http:     &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}},
		versions: map[string]int64{}}
}

func (g *loadGen) run(ctx context.Context) {
	lim := rate.NewLimiter(rate.Limit(g.rps), max(1, int(g.rps/10)))
	zipf := rand.NewZipf(rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())), 1.1, 4, demoItems-1)
	var zmu sync.Mutex
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	defer wg.Wait()
	for n := 0; ; n++ {
		if err := lim.Wait(ctx); err != nil {
			return
		}
		k := g.keys[rand.N(len(g.keys))]
		var item string
		write := n%10 == 9
		if write {
			item = fmt.Sprintf("item-%05d", 1+rand.N(demoItems))
		} else {
			zmu.Lock()
			item = fmt.Sprintf("item-%05d", 1+zipf.Uint64())
			zmu.Unlock()
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if write {
				g.update(ctx, k, item)
			} else {
				g.read(ctx, k, item)
			}
		}()
	}
}

type itemJSON struct {
	ItemID         string          `json:"item_id"`
	Version        int64           `json:"version"`
	Display        json.RawMessage `json:"display"`
	CurrentVersion int64           `json:"current_version"`
}

func (g *loadGen) do(ctx context.Context, k apiKey, method, path string, body []byte, hdr map[string]string) (*http.Response, itemJSON, error) {
	req, err := http.NewRequestWithContext(ctx, method, g.base+path, bytes.NewReader(body))
	if err != nil {
		return nil, itemJSON{}, err
	}
	req.Header.Set("Authorization", "Bearer "+k.key)
	for h, v := range hdr {
		req.Header.Set(h, v)
	}
	resp, err := g.http.Do(req)
	if err != nil {
		return nil, itemJSON{}, err
	}
	defer resp.Body.Close()
	var it itemJSON
	b, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(b, &it)
	return resp, it, nil
}

func (g *loadGen) read(ctx context.Context, k apiKey, item string) {
	resp, it, err := g.do(ctx, k, http.MethodGet, "/v1/catalog/items/"+item, nil, nil)
	if err != nil {
		if ctx.Err() == nil {
			g.errs.Add(1)
		}
		return
	}
	g.reads.Add(1)
	cs := resp.Header.Get("Cache-Status")
	if strings.Contains(cs, "; hit") && !strings.Contains(cs, "stale") {
		g.hits.Add(1)
	}
	if resp.StatusCode == http.StatusOK {
		g.remember(k.tenant, item, it.Version)
	} else if resp.StatusCode >= 500 {
		g.errs.Add(1)
	}
}

func (g *loadGen) remember(tenant, item string, v int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if v > g.versions[tenant+"/"+item] {
		g.versions[tenant+"/"+item] = v
	}
}

func (g *loadGen) update(ctx context.Context, k apiKey, item string) {
	g.mu.Lock()
	v := g.versions[k.tenant+"/"+item]
	g.mu.Unlock()
	if v == 0 {
		v = 1
	}
	for attempt := 0; attempt < 3; attempt++ {
		body, _ := json.Marshal(map[string]any{"expected_version": v,
			"display": map[string]any{"title": k.tenant + " " + item, "price_cents": 100 + rand.N(10000)}})
		resp, it, err := g.do(ctx, k, http.MethodPatch, "/v1/catalog/items/"+item, body,
			map[string]string{"Idempotency-Key": fmt.Sprintf("demo-%d-%d", time.Now().UnixNano(), rand.Uint64())})
		if err != nil {
			if ctx.Err() == nil {
				g.errs.Add(1)
			}
			return
		}
		switch resp.StatusCode {
		case http.StatusOK:
			g.upds.Add(1)
			g.remember(k.tenant, item, it.Version)
			return
		case http.StatusConflict: // someone else wrote: retry on the current version
			v = it.CurrentVersion
			continue
		default:
			g.errs.Add(1)
			return
		}
	}
}
