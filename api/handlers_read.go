package api

import (
	"net/http"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/tidemark/tidemark/reader"
	"github.com/tidemark/tidemark/rollout"
)

func (s *Server) getItem(w http.ResponseWriter, r *http.Request, tenant string) {
	id := r.PathValue("id")
	if err := validID("item id", id); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	var minVersion int64
	v, given, err := queryParam(r, "min_version")
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	if given {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, "bad_request", "min_version must be a non-negative integer")
			return
		}
		minVersion = n
	}
	ctx, span := s.startGet(r, tenant, id, minVersion)
	defer span.End()
	q := reader.Query{Tenant: tenant, Item: id, MinVersion: minVersion, Spread: readerHash(r)}
	if route, _ := s.rollout.route(tenant, id); route != rollout.ModeCache {
		s.rollout.m.read(route).Inc()
		if span.IsRecording() {
			span.SetAttributes(attribute.String("tidemark.rollout", string(route)))
		}
		rr := s.serveFromSource(r.WithContext(ctx), q, route == rollout.ModeShadow || s.rolloutRamping(tenant))
		endGet(span, rr)
		s.respondRead(w, id, rr)
		return
	}
	s.rollout.m.read(rollout.ModeCache).Inc()
	rr := s.rd.Get(ctx, q)
	endGet(span, rr)
	s.respondRead(w, id, rr)
}

func (s *Server) respondRead(w http.ResponseWriter, id string, rr reader.Result) {
	h := w.Header()
	switch rr.Kind {
	case reader.Found:
		// Age counts from the effective source observation; ttl (RFC 9211)
		// is what is left of the hard deadline, so a client can check that
		// Age + ttl never exceeds the promise.
		now := s.clock.Now()
		age := max(0, now.Sub(rr.EffObs)/time.Second)
		writeItem(w, id, rr.Version, rr.Payload, strconv.FormatInt(int64(age), 10),
			rr.CacheStatus+"; ttl="+strconv.FormatInt(int64(max(0, rr.Hard.Sub(now)/time.Second)), 10))
		return
	}
	h.Set("Cache-Status", rr.CacheStatus)
	switch rr.Kind {
	case reader.NotFound:
		writeError(w, http.StatusNotFound, "not_found", "no such item")
	case reader.BelowMin:
		writeVersionError(w, http.StatusPreconditionFailed, "min_version_not_reached",
			"the item's current version is below min_version", id, rr.Version)
	case reader.BadMinVersion:
		writeVersionError(w, http.StatusBadRequest, "min_version_out_of_range", rr.Message, id, rr.Version)
	default:
		secs := int64((rr.RetryAfter + time.Second - 1) / time.Second)
		h.Set("Retry-After", strconv.FormatInt(max(1, secs), 10))
		writeError(w, http.StatusServiceUnavailable, "unavailable", "the catalog source is busy or unavailable; retry later")
	}
}
