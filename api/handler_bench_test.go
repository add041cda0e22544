package api

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// BenchmarkGetHit is the handler's own cost for a cache hit (no network to
// the client), with and without L1.
func BenchmarkGetHit(b *testing.B) {
	for _, l1 := range []int{0, 10000} {
		b.Run(map[int]string{0: "redis", 10000: "l1"}[l1], func(b *testing.B) {
			e := newEnv(b)
			in := e.instance(instOpts{cfg: func(c *Config) { c.L1Size = l1 }})
			key := e.apiKey("acme")
			e.exec(`INSERT INTO catalog.items (tenant_id, item_id, version, display) VALUES ('acme', 'hot', 1, '{"name":"x","text":"lorem ipsum lorem ipsum lorem ipsum"}')`)
			req := httptest.NewRequest("GET", "/v1/catalog/items/hot", nil)
			req.Header.Set("Authorization", "Bearer "+key)
			h := in.srv.Handler()
			for range 3 {
				h.ServeHTTP(httptest.NewRecorder(), req)
			}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					w := httptest.NewRecorder()
					h.ServeHTTP(w, req)
					if w.Code != http.StatusOK {
						b.Fatalf("%d %s", w.Code, w.Body)
					}
				}
			})
		})
	}
}
