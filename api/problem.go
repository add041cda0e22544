package api

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// problemType is the media type of every error response (RFC 9457).
const problemType = "application/problem+json"

// errorJSON is every error body: an RFC 9457 problem document (type, title,
// status, detail) plus the API's stable machine-readable `code` and, for
// version errors, the item and its current version. `error` repeats detail
// for clients written against the earlier body.
type errorJSON struct {
	Type           string `json:"type"`
	Title          string `json:"title"`
	Status         int    `json:"status"`
	Detail         string `json:"detail"`
	Code           string `json:"code"`
	Error          string `json:"error"`
	ItemID         string `json:"item_id,omitempty"`
	CurrentVersion *int64 `json:"current_version,omitempty"`
}

// problem fills the RFC 9457 members for status. The type is about:blank:
// the status and `code` say everything a client branches on.
func (e errorJSON) problem(status int) errorJSON {
	e.Type, e.Title, e.Status = "about:blank", http.StatusText(status), status
	if e.Detail == "" {
		e.Detail = e.Error
	}
	e.Error = e.Detail
	return e
}

// asProblem returns body with its problem members filled when it is an
// error body.
func asProblem(status int, body any) any {
	if e, ok := body.(errorJSON); ok {
		return e.problem(status)
	}
	return body
}

// contentType is the media type of a response body with this status.
func contentType(status int) string {
	if status >= 400 {
		return problemType
	}
	return "application/json"
}

func writeProblem(w http.ResponseWriter, status int, e errorJSON) {
	b, err := json.Marshal(e.problem(status))
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"type":"about:blank","title":"Internal Server Error","status":500,"detail":"encoding the response failed","code":"internal","error":"encoding the response failed"}`)
	}
	w.Header().Set("Content-Type", problemType)
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}
