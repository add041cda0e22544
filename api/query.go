package api

import (
	"fmt"
	"net/http"
)

// queryParam is the one value of a query parameter, and whether it was
// given. A parameter given twice, or present but empty, is a mistake the
// caller must hear about (400), never read as its first value or as absent:
// `?min_version=&min_version=7` would otherwise be a read without
// read-your-writes.
func queryParam(r *http.Request, name string) (string, bool, error) {
	if r.URL.RawQuery == "" {
		return "", false, nil // most GETs: parsing an empty query still allocates
	}
	vs, ok := r.URL.Query()[name]
	switch {
	case !ok:
		return "", false, nil
	case len(vs) > 1:
		return "", true, fmt.Errorf("%s must be given once (got %d values)", name, len(vs))
	case vs[0] == "":
		return "", true, fmt.Errorf("%s must not be empty", name)
	}
	return vs[0], true, nil
}
