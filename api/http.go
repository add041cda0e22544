package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// endpoint wraps a handler with metrics and authentication: the tenant comes
// only from the API key, never from the path or body.
func (s *Server) endpoint(route string, h func(http.ResponseWriter, *http.Request, string)) http.Handler {
	hist := s.m.requestSeconds.WithLabelValues(route)
	ok := s.m.requests.WithLabelValues(route, "200")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		// The status recorder and the answer's finisher (itemWriter) are
		// one allocation: every request needs both.
		aw := &answerWriter{sw: statusWriter{ResponseWriter: w, code: http.StatusOK}}
		sw := &aw.sw
		defer func() {
			hist.Observe(time.Since(start).Seconds())
			if sw.code == http.StatusOK {
				ok.Inc()
			} else {
				s.m.requests.WithLabelValues(route, strconv.Itoa(sw.code)).Inc()
			}
		}()
		tenant, err := s.auth.tenant(r.Context(), r.Header.Get("Authorization"))
		switch {
		case errors.Is(err, errUnauthorized):
			sw.Header().Set("WWW-Authenticate", `Bearer realm="tidemark"`)
			writeError(sw, http.StatusUnauthorized, "unauthorized", "a valid API key is required: Authorization: Bearer <key>")
			return
		case err != nil:
			sw.Header().Set("Retry-After", "1")
			writeError(sw, http.StatusServiceUnavailable, "unavailable", "the API key cannot be checked right now")
			return
		}
		aw.iw = itemWriter{ResponseWriter: sw, tag: s.tags.tag(tenant), inm: ifNoneMatch(r)}
		h(&aw.iw, r, tenant)
	})
}

// answerWriter holds the two wrappers endpoint puts around every answer.
type answerWriter struct {
	sw statusWriter
	iw itemWriter
}

type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}

// itemJSON is the item representation of every response.
type itemJSON struct {
	ItemID  string          `json:"item_id"`
	Version int64           `json:"version"`
	Display json.RawMessage `json:"display"`
}

func writeError(w http.ResponseWriter, code int, short, msg string) {
	writeProblem(w, code, errorJSON{Detail: msg, Code: short})
}

func writeVersionError(w http.ResponseWriter, code int, short, msg, item string, current int64) {
	writeProblem(w, code, errorJSON{Detail: msg, Code: short, ItemID: item, CurrentVersion: &current})
}

// writeItem is the hot path's writeJSON: the payload is JSON already (it came
// from a jsonb column), so it is spliced in rather than re-validated. Every
// cache hit comes here, so its five headers share one backing array (one
// allocation, not five); each slice is capped so an Add cannot overwrite the
// next header. Written through an itemWriter, the ETag is the tenant-scoped
// one at once (itemWriter would otherwise parse and rewrite it).
func writeItem(w http.ResponseWriter, item string, version int64, display []byte, age, cacheStatus string) {
	if len(display) == 0 {
		display = []byte("null")
	}
	b := make([]byte, 0, len(item)+len(display)+48)
	b = append(b, `{"item_id":`...)
	b = appendJSONString(b, item)
	b = append(b, `,"version":`...)
	b = strconv.AppendInt(b, version, 10)
	b = append(b, `,"display":`...)
	b = append(b, display...)
	b = append(b, "}\n"...)
	var tag string
	if iw, ok := w.(*itemWriter); ok {
		tag, iw.scoped = scopedETag(version, iw.tag), true
	} else {
		tag = etag(version)
	}
	v := &[5]string{"application/json", strconv.Itoa(len(b)), tag, age, cacheStatus}
	h := w.Header()
	h["Content-Type"], h["Content-Length"], h["Etag"] = v[0:1:1], v[1:2:2], v[2:3:3]
	h["Age"], h["Cache-Status"] = v[3:4:4], v[4:5:5]
	w.WriteHeader(http.StatusOK)
	w.Write(b)
}

// appendJSONString appends s as a JSON string: directly when it is printable
// ASCII that encoding/json would not escape (item IDs almost always are),
// through encoding/json otherwise.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

func itemBody(item string, version int64, display []byte) itemJSON {
	if len(display) == 0 {
		display = []byte("null")
	}
	return itemJSON{ItemID: item, Version: version, Display: display}
}

const maxIDBytes = 256

// validID accepts 1..256 bytes of UTF-8 without control characters: such an
// ID is safe in logs, JSON and (escaped) Redis and Kafka keys.
func validID(what, id string) error {
	if id == "" || len(id) > maxIDBytes {
		return fmt.Errorf("%s must be 1 to %d bytes", what, maxIDBytes)
	}
	if !utf8.ValidString(id) {
		return fmt.Errorf("%s must be valid UTF-8", what)
	}
	for _, r := range id {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return fmt.Errorf("%s must not contain control characters", what)
		}
	}
	return nil
}

// decodeBody reads exactly one JSON object of the request's type: size
// limited, unknown fields rejected, nothing after it.
func (s *Server) decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	body := http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
	raw, err := io.ReadAll(body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return fmt.Errorf("body exceeds %d bytes", s.cfg.MaxBodyBytes)
		}
		return fmt.Errorf("reading the body: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("malformed JSON body: %v", err)
	}
	if dec.More() {
		return errors.New("malformed JSON body: data after the object")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("malformed JSON body: data after the object")
	}
	return nil
}

// validDisplay requires a display value that is present and not null, and
// returns it compacted (so equal bodies hash equally).
func validDisplay(raw json.RawMessage) ([]byte, error) {
	if len(raw) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return nil, errors.New("display is required and must not be null")
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return nil, fmt.Errorf("display: %v", err)
	}
	if hasNUL(b.Bytes()) {
		// Postgres's jsonb cannot hold U+0000; refused here it is the
		// client's error, not an unavailable catalog.
		return nil, errors.New(`display: strings and keys must not contain U+0000 ("\u0000")`)
	}
	return b.Bytes(), nil
}

// hasNUL reports whether a string or key of the valid JSON doc holds U+0000.
func hasNUL(doc []byte) bool {
	if !bytes.Contains(doc, []byte(`\u0000`)) {
		return false // the only way to write U+0000 in JSON
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		if s, ok := tok.(string); ok && strings.IndexByte(s, 0) >= 0 {
			return true
		}
	}
}

// withTimeout is context.WithTimeout that also survives the client going away
// mid-write: a write transaction, once started, finishes or rolls back on its
// own deadline.
func withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), d)
}
