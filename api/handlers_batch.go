package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/tidemark/tidemark/reader"
	"github.com/tidemark/tidemark/rollout"
)

// The batch read (GET /v1/catalog/items:batchGet?id=a&id=b): a product page
// shows many items. Each item is answered as its own GET would be, with its
// own status, version, ETag, age and Cache-Status; what L1 does not answer
// is looked up in the cache tier in one pipelined round trip
// (reader.GetMany). Items are named by repeated `id` parameters, so an id
// may hold any character, a comma too.

// batchMaxIDs bounds one batch (a page of items, not a scan).
const batchMaxIDs = 100

// batchItemJSON is one item of a batch answer: an item (status 200) or why
// there is none.
type batchItemJSON struct {
	ItemID  string          `json:"item_id"`
	Status  int             `json:"status"`
	Version int64           `json:"version,omitempty"`
	Display json.RawMessage `json:"display,omitempty"`
	ETag    string          `json:"etag,omitempty"`
	// Age is the answer's Age header for its own GET: seconds since the
	// source observation it counts from.
	Age         *int64 `json:"age,omitempty"`
	CacheStatus string `json:"cache_status"`
	Code        string `json:"code,omitempty"`
	RetryAfter  int64  `json:"retry_after,omitempty"`
}

func (s *Server) batchGet(w http.ResponseWriter, r *http.Request, tenant string) {
	ids, err := batchIDs(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	// Distinct ids, each read once; answered in the request's order.
	pos := make(map[string]int, len(ids))
	var uniq []string
	for _, id := range ids {
		if _, ok := pos[id]; !ok {
			pos[id] = len(uniq)
			uniq = append(uniq, id)
		}
	}
	results := make([]reader.Result, len(uniq))
	var cached, sourced []int
	for i, id := range uniq {
		route, _ := s.rollout.route(tenant, id)
		s.rollout.m.read(route).Inc()
		if route == rollout.ModeCache {
			cached = append(cached, i)
		} else {
			sourced = append(sourced, i)
		}
	}
	var wg sync.WaitGroup
	for _, i := range sourced {
		wg.Add(1)
		go func() {
			defer wg.Done()
			route, _ := s.rollout.route(tenant, uniq[i])
			results[i] = s.serveFromSource(r, reader.Query{Tenant: tenant, Item: uniq[i], Spread: readerHash(r)},
				route == rollout.ModeShadow || s.rolloutRamping(tenant))
		}()
	}
	if len(cached) > 0 {
		cids := make([]string, len(cached))
		for j, i := range cached {
			cids[j] = uniq[i]
		}
		for j, rr := range s.rd.GetMany(r.Context(), tenant, cids, readerHash(r)) {
			results[cached[j]] = rr
		}
	}
	wg.Wait()

	now := s.clock.Now()
	tag := s.tags.tag(tenant)
	out := struct {
		Items []batchItemJSON `json:"items"`
	}{Items: make([]batchItemJSON, len(ids))}
	for k, id := range ids {
		out.Items[k] = batchItem(id, results[pos[id]], now, tag)
	}
	b, err := json.Marshal(out)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "internal", "encoding the response failed")
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)+1))
	// Each item carries its own ETag and age; the page as a whole is not
	// stored by any cache (it depends on the key, and on every item).
	h.Set("Cache-Control", "private, no-store")
	h.Set("Vary", "Authorization")
	w.WriteHeader(http.StatusOK)
	w.Write(append(b, '\n'))
}

// batchIDs reads the repeated id parameters (and nothing else).
func batchIDs(r *http.Request) ([]string, error) {
	q := r.URL.Query()
	for name := range q {
		if name != "id" {
			return nil, fmt.Errorf("unknown query parameter %q (items are named by repeated id parameters)", name)
		}
	}
	ids := q["id"]
	if len(ids) == 0 || len(ids) > batchMaxIDs {
		return nil, fmt.Errorf("give 1 to %d id parameters (got %d)", batchMaxIDs, len(ids))
	}
	for _, id := range ids {
		if err := validID("item id", id); err != nil {
			return nil, err
		}
	}
	return ids, nil
}

// batchItem is rr as the item's own GET would answer it (respondRead).
func batchItem(id string, rr reader.Result, now time.Time, tag string) batchItemJSON {
	it := batchItemJSON{ItemID: id, Status: httpStatus(rr), CacheStatus: rr.CacheStatus}
	switch rr.Kind {
	case reader.Found:
		age := int64(max(0, now.Sub(rr.EffObs)/time.Second))
		it.Version, it.Age, it.ETag = rr.Version, &age, scopedETag(rr.Version, tag)
		it.Display = rr.Payload
		if len(it.Display) == 0 {
			it.Display = json.RawMessage("null")
		}
		it.CacheStatus += "; ttl=" + strconv.FormatInt(int64(max(0, rr.Hard.Sub(now)/time.Second)), 10)
	case reader.NotFound:
		it.Code = "not_found"
	default:
		// Without min_version only Found, NotFound and Unavailable occur.
		it.Code = "unavailable"
		it.RetryAfter = max(1, int64((rr.RetryAfter+time.Second-1)/time.Second))
	}
	return it
}
