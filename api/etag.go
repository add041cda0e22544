package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
)

// etag is an item's entity tag: its version, which changes with every write.
func etag(version int64) string {
	var b [24]byte // one allocation (the string), on every cache hit
	return string(strconv.AppendInt(append(b[:0], '"'), version, 10)) + `"`
}

// setItemETag sets the ETag of a 2xx write answer from the item body it
// carries (stored answers of idempotent retries are only bytes).
func setItemETag(w http.ResponseWriter, status int, body []byte) {
	if status < 200 || status > 299 {
		return
	}
	var it struct {
		Version *int64 `json:"version"`
	}
	if json.Unmarshal(body, &it) == nil && it.Version != nil {
		w.Header().Set("ETag", etag(*it.Version))
	}
}

// noneMatch reports whether an If-None-Match header value matches tag
// (weak comparison, as RFC 9110 asks for If-None-Match).
func noneMatch(header, tag string) bool {
	tag = strings.TrimPrefix(tag, "W/")
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimSpace(t)
		if t == "*" || strings.TrimPrefix(t, "W/") == tag {
			return true
		}
	}
	return false
}

// conditionalGET turns a 200 whose ETag matches the request's If-None-Match
// into a 304 without a body.
type conditionalGET struct {
	http.ResponseWriter
	inm         string
	notModified bool
}

func (w *conditionalGET) WriteHeader(code int) {
	if code == http.StatusOK && noneMatch(w.inm, w.Header().Get("ETag")) && w.Header().Get("ETag") != "" {
		w.notModified = true
		h := w.Header()
		h.Del("Content-Type")
		h.Del("Content-Length")
		code = http.StatusNotModified
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *conditionalGET) Write(b []byte) (int, error) {
	if w.notModified {
		return len(b), nil
	}
	return w.ResponseWriter.Write(b)
}

// conditional wraps w for a GET with If-None-Match.
func conditional(w http.ResponseWriter, r *http.Request) http.ResponseWriter {
	if inm := r.Header.Get("If-None-Match"); inm != "" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		return &conditionalGET{ResponseWriter: w, inm: inm}
	}
	return w
}

var errIfMatch = errors.New(`If-Match must be one strong ETag from an earlier response (e.g. "3")`)

// expectedVersion is the version a write expects: from If-Match (the
// standard precondition) or from expected_version (body or query). Both may
// be given only when they agree. byIfMatch reports that If-Match set it, so
// a mismatch answers 412 Precondition Failed rather than 409.
func expectedVersion(r *http.Request, fromRequest *int64) (v int64, byIfMatch bool, err error) {
	_, present := r.Header["If-Match"] // present but empty is malformed, not absent
	im := strings.TrimSpace(r.Header.Get("If-Match"))
	if !present {
		if fromRequest == nil || *fromRequest < 1 {
			return 0, false, errors.New("expected_version (or an If-Match header) is required and must be a positive integer")
		}
		return *fromRequest, false, nil
	}
	unq, ok := strings.CutPrefix(im, `"`)
	if !ok || !strings.HasSuffix(unq, `"`) {
		return 0, false, errIfMatch
	}
	v, err = strconv.ParseInt(strings.TrimSuffix(unq, `"`), 10, 64)
	if err != nil || v < 1 {
		return 0, false, errIfMatch
	}
	if fromRequest != nil && *fromRequest != v {
		return 0, false, errors.New("If-Match and expected_version disagree")
	}
	return v, true, nil
}

// preconditionFailed turns a version conflict into 412 when If-Match
// carried the expectation.
func preconditionFailed(o writeOutcome, byIfMatch bool) writeOutcome {
	if byIfMatch && o.status == http.StatusConflict {
		o.status = http.StatusPreconditionFailed
	}
	return o
}
