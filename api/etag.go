package api

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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

// tenantTag is the tenant part of an ETag: the first 48 bits of the
// tenant's SHA-256, in hex. Every item starts at version 1 and the URL is
// the same for every tenant, so a version alone would let a client cache
// shared by two tenants (a BFF, a browser) revalidate one tenant's stored
// body with the other's key and get 304.
func tenantTag(tenant string) string {
	sum := sha256.Sum256([]byte(tenant))
	return hex.EncodeToString(sum[:6])
}

// validTag reports whether t has the form tenantTag gives: 12 lowercase
// hex digits.
func validTag(t string) bool {
	if len(t) != 12 {
		return false
	}
	for _, c := range t {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// tagMemo memoises tenantTag: every authenticated answer needs its
// tenant's tag, and a SHA-256 per request is a visible part of a cache
// hit's cost. Reads take no lock (the map is replaced, never changed);
// past maxTagMemo tenants the tag is computed each time.
type tagMemo struct {
	mu sync.Mutex
	m  atomic.Pointer[map[string]string]
}

const maxTagMemo = 4096

func (t *tagMemo) tag(tenant string) string {
	if m := t.m.Load(); m != nil {
		if tag, ok := (*m)[tenant]; ok {
			return tag
		}
	}
	tag := tenantTag(tenant)
	t.mu.Lock()
	defer t.mu.Unlock()
	if old := t.m.Load(); old == nil || len(*old) < maxTagMemo {
		m := map[string]string{tenant: tag}
		if old != nil {
			for k, v := range *old {
				m[k] = v
			}
		}
		t.m.Store(&m)
	}
	return tag
}

// scopedETag is the ETag a tenant sees for version: "<version>.<tenantTag>".
func scopedETag(version int64, tag string) string {
	return `"` + strconv.FormatInt(version, 10) + "." + tag + `"`
}

// itemWriter finishes every authenticated answer: a 2xx item answer's
// version ETag ("<version>", set by writeItem and setItemETag) becomes the
// tenant-scoped one, and it carries Cache-Control: private, no-cache (a
// shared cache must not store it; a private one must revalidate) and Vary:
// Authorization (the body depends on the key). A GET whose If-None-Match
// holds the scoped ETag becomes a 304 without a body, with those headers.
type itemWriter struct {
	http.ResponseWriter
	tag         string
	inm         string // If-None-Match of a GET or HEAD
	scoped      bool   // the ETag set is the scoped one already (writeItem)
	notModified bool
}

func (w *itemWriter) WriteHeader(code int) {
	h := w.Header()
	if code >= 200 && code <= 299 {
		if et := h.Get("ETag"); et != "" {
			if !w.scoped { // writeItem sets the scoped one itself
				if v, err := strconv.ParseInt(strings.Trim(et, `"`), 10, 64); err == nil {
					h["Etag"] = []string{scopedETag(v, w.tag)}
				}
			}
			h["Cache-Control"] = cacheControlPrivate
			h["Vary"] = varyAuthorization
		}
	}
	if code == http.StatusOK && w.inm != "" && h.Get("ETag") != "" && noneMatch(w.inm, h.Get("ETag")) {
		w.notModified = true
		h.Del("Content-Type")
		h.Del("Content-Length")
		code = http.StatusNotModified
	}
	w.ResponseWriter.WriteHeader(code)
}

var (
	cacheControlPrivate = []string{"private, no-cache"}
	varyAuthorization   = []string{"Authorization"}
)

func (w *itemWriter) Write(b []byte) (int, error) {
	if w.notModified {
		return len(b), nil
	}
	return w.ResponseWriter.Write(b)
}

// ifNoneMatch is the If-None-Match an itemWriter answers r by: a GET's or
// HEAD's ("" for other methods).
func ifNoneMatch(r *http.Request) string {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return r.Header.Get("If-None-Match")
	}
	return ""
}

var errIfMatch = errors.New(`If-Match must be one strong ETag from an earlier response (e.g. "3.1a2b3c4d5e6f", or "3")`)

// errIfMatchTenant: If-Match holds an ETag another tenant was given; it
// cannot match anything this tenant has (412).
var errIfMatchTenant = errors.New("If-Match holds an ETag of another tenant's item")

// expectedVersion is the version a write expects: from If-Match (the
// standard precondition) or from expected_version (body or query). Both may
// be given only when they agree. byIfMatch reports that If-Match set it, so
// a mismatch answers 412 Precondition Failed rather than 409.
//
// If-Match may be the tenant-scoped ETag "<version>.<tag>" or the bare
// "<version>"; a scoped one with another tenant's tag is errIfMatchTenant.
func expectedVersion(r *http.Request, fromRequest *int64, tag string) (v int64, byIfMatch bool, err error) {
	_, present := r.Header["If-Match"] // present but empty is malformed, not absent
	im := strings.TrimSpace(r.Header.Get("If-Match"))
	if !present && fromRequest == nil {
		return 0, false, errors.New("expected_version (or an If-Match header) is required and must be a positive integer")
	}
	// A malformed expected_version is 400 before If-Match is judged: a
	// request the schema refuses is never answered 412.
	if fromRequest != nil && *fromRequest < 1 {
		return 0, false, errors.New("expected_version must be a positive integer")
	}
	if !present {
		return *fromRequest, false, nil
	}
	unq, ok := strings.CutPrefix(im, `"`)
	if !ok || !strings.HasSuffix(unq, `"`) {
		return 0, false, errIfMatch
	}
	ver, etTag, scoped := strings.Cut(strings.TrimSuffix(unq, `"`), ".")
	v, err = strconv.ParseInt(ver, 10, 64)
	if err != nil || v < 1 {
		return 0, false, errIfMatch
	}
	if scoped && !validTag(etTag) {
		return 0, false, errIfMatch // not an ETag this API gives out: malformed, not another tenant's
	}
	if scoped && etTag != tag {
		return 0, false, errIfMatchTenant
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
