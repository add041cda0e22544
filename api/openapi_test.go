package api

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

type openAPIDoc struct {
	OpenAPI string                                `json:"openapi"`
	Paths   map[string]map[string]json.RawMessage `json:"paths"`
}

type openAPIOp struct {
	Responses map[string]struct {
		Ref     string                     `json:"$ref"`
		Content map[string]json.RawMessage `json:"content"`
	} `json:"responses"`
}

// documented returns "METHOD path" -> documented status codes.
func documented(t *testing.T) map[string][]int {
	t.Helper()
	var doc openAPIDoc
	if err := json.Unmarshal(openAPI, &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	if doc.OpenAPI != "3.1.0" {
		t.Fatalf("openapi %q, want 3.1.0", doc.OpenAPI)
	}
	ops := map[string][]int{}
	for path, item := range doc.Paths {
		for method, raw := range item {
			if method == "parameters" {
				continue
			}
			var op openAPIOp
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatalf("%s %s: %v", method, path, err)
			}
			var codes []int
			for c := range op.Responses {
				n, err := strconv.Atoi(c)
				if err != nil {
					t.Fatalf("%s %s: response %q is not a status code", method, path, c)
				}
				codes = append(codes, n)
			}
			slices.Sort(codes)
			ops[strings.ToUpper(method)+" "+path] = codes
		}
	}
	return ops
}

// TestOpenAPIRoutesMatchMux: the document lists exactly the routes the
// server registers (read from the source, so a new route without a
// contract fails here).
func TestOpenAPIRoutesMatchMux(t *testing.T) {
	src, err := os.ReadFile("server.go")
	if err != nil {
		t.Fatal(err)
	}
	var routes []string
	for _, m := range regexp.MustCompile(`mux\.Handle(?:Func)?\("([A-Z]+ [^"]+)"`).FindAllStringSubmatch(string(src), -1) {
		routes = append(routes, m[1])
	}
	slices.Sort(routes)
	doc := slices.Sorted(maps.Keys(documented(t)))
	if !slices.Equal(routes, doc) {
		t.Fatalf("server routes %v\ndocumented     %v", routes, doc)
	}
}

// TestOpenAPIStatusCodesAreReal sends requests that provoke each documented
// status of each operation and checks every answer against the document:
// its status is documented, errors are application/problem+json with the
// problem members and a code, 200/201 carry the version as ETag; and every
// documented status was seen (503 is provoked by the read and auth tests,
// which stop Postgres or Redis).
func TestOpenAPIStatusCodesAreReal(t *testing.T) {
	e := newEnv(t)
	in := e.instance(instOpts{})
	key, other := e.apiKey("acme"), e.apiKey("globex")
	doc := documented(t)
	seen := map[string]map[int]bool{}
	// Answers that are not one item carry no ETag of their own.
	unversioned := map[string]bool{"GET /v1/openapi.json": true, "GET /v1/catalog/items": true, "GET /v1/catalog/items:batchGet": true}
	n := 0
	check := func(op, method, path, key, body string, want int, headers ...string) resp {
		t.Helper()
		n++
		r := e.do(method, in.url+path, key, body, headers...)
		if r.code != want {
			t.Errorf("%s %s: %d %s, want %d", method, path, r.code, r.raw, want)
		}
		if !slices.Contains(doc[op], r.code) {
			t.Errorf("%s %s answered %d, which %s does not document (%v)", method, path, r.code, op, doc[op])
		}
		if seen[op] == nil {
			seen[op] = map[int]bool{}
		}
		seen[op][r.code] = true
		ct := r.header.Get("Content-Type")
		switch {
		case r.code >= 400:
			if ct != problemType {
				t.Errorf("%s %s: %d with Content-Type %q, want %s", method, path, r.code, ct, problemType)
			}
			for _, m := range []string{"type", "title", "status", "detail", "code"} {
				if r.body[m] == nil {
					t.Errorf("%s %s: problem lacks %q: %s", method, path, m, r.raw)
				}
			}
			if s, _ := r.body["status"].(float64); int(s) != r.code {
				t.Errorf("%s %s: problem status %v, response %d", method, path, r.body["status"], r.code)
			}
		case r.code == 200 || r.code == 201:
			et := r.header.Get("ETag")
			if !unversioned[op] && et != fmt.Sprintf(`"%d.%s"`, r.version(), tenantTag("acme")) && et != fmt.Sprintf(`"%d.%s"`, r.version(), tenantTag("globex")) {
				t.Errorf("%s %s: ETag %q for version %d, want the tenant-scoped one", method, path, et, r.version())
			}
			if !unversioned[op] && (r.header.Get("Cache-Control") != "private, no-cache" || r.header.Get("Vary") != "Authorization") {
				t.Errorf("%s %s: Cache-Control %q, Vary %q, want private, no-cache and Authorization", method, path, r.header.Get("Cache-Control"), r.header.Get("Vary"))
			}
		case r.code == 304:
			if r.raw != "" || r.header.Get("ETag") == "" {
				t.Errorf("%s %s: 304 with body %q and ETag %q", method, path, r.raw, r.header.Get("ETag"))
			}
		}
		return r
	}
	const (
		create = "POST /v1/catalog/items"
		get    = "GET /v1/catalog/items/{id}"
		patch  = "PATCH /v1/catalog/items/{id}"
		del    = "DELETE /v1/catalog/items/{id}"
	)
	check("GET /v1/openapi.json", "GET", "/v1/openapi.json", "", "", 200)

	check(create, "POST", "/v1/catalog/items", key, `{"item_id":"oa","display":{"t":1}}`, 201, "Idempotency-Key", "oa-create")
	check(create, "POST", "/v1/catalog/items", key, `{"item_id":"oa","display":{"t":2}}`, 409)
	check(create, "POST", "/v1/catalog/items", key, `{"item_id":"oa2","display":{"t":1}}`, 422, "Idempotency-Key", "oa-create")
	check(create, "POST", "/v1/catalog/items", key, `{"item_id":"oa"}`, 400)
	check(create, "POST", "/v1/catalog/items", "", `{"item_id":"oa","display":1}`, 401)

	g := check(get, "GET", "/v1/catalog/items/oa", key, "", 200)
	check(get, "GET", "/v1/catalog/items/oa", key, "", 304, "If-None-Match", g.header.Get("ETag"))
	check(get, "GET", "/v1/catalog/items/oa", key, "", 200, "If-None-Match", `"7", W/"8"`)
	check(get, "GET", "/v1/catalog/items/oa?min_version=5", key, "", 412)
	check(get, "GET", "/v1/catalog/items/oa?min_version=x", key, "", 400)
	check(get, "GET", "/v1/catalog/items/oa", other, "", 404) // another tenant's item
	check(get, "GET", "/v1/catalog/items/oa", "nope", "", 401)

	const batch = "GET /v1/catalog/items:batchGet"
	check(batch, "GET", "/v1/catalog/items:batchGet?id=oa&id=none", key, "", 200)
	check(batch, "GET", "/v1/catalog/items:batchGet?ids=oa,none", key, "", 400)
	check(batch, "GET", "/v1/catalog/items:batchGet", key, "", 400)
	check(batch, "GET", "/v1/catalog/items:batchGet?id=oa", "nope", "", 401)

	// If-Match is the standard form of expected_version.
	check(patch, "PATCH", "/v1/catalog/items/oa", key, `{"display":{"t":3}}`, 412, "Idempotency-Key", "oa-p1", "If-Match", `"9"`)
	p := check(patch, "PATCH", "/v1/catalog/items/oa", key, `{"display":{"t":3}}`, 200, "Idempotency-Key", "oa-p2", "If-Match", `"1"`)
	if p.version() != 2 {
		t.Errorf("PATCH with If-Match \"1\": version %d, want 2", p.version())
	}
	check(patch, "PATCH", "/v1/catalog/items/oa", key, `{"expected_version":1,"display":{"t":4}}`, 409, "Idempotency-Key", "oa-p3")
	check(patch, "PATCH", "/v1/catalog/items/oa", key, `{"expected_version":1,"display":{"t":4}}`, 400, "Idempotency-Key", "oa-p4", "If-Match", `"2"`)
	check(patch, "PATCH", "/v1/catalog/items/oa", key, `{"display":{"t":4}}`, 400, "Idempotency-Key", "oa-p5", "If-Match", `W/"2"`)
	check(patch, "PATCH", "/v1/catalog/items/oa", key, `{"expected_version":2,"display":{"t":4}}`, 400, "Idempotency-Key", "oa-p7", "If-Match", "")
	check(patch, "PATCH", "/v1/catalog/items/oa", key, `{"display":{"t":5}}`, 422, "Idempotency-Key", "oa-p2", "If-Match", `"2"`)
	check(patch, "PATCH", "/v1/catalog/items/none", key, `{"display":{"t":5}}`, 404, "Idempotency-Key", "oa-p6", "If-Match", `"1"`)
	check(patch, "PATCH", "/v1/catalog/items/oa", "", `{"display":1}`, 401)

	check(del, "DELETE", "/v1/catalog/items/oa", key, "", 412, "If-Match", `"1"`)
	check(del, "DELETE", "/v1/catalog/items/oa?expected_version=1", key, "", 409)
	check(del, "DELETE", "/v1/catalog/items/oa", key, "", 400)
	check(del, "DELETE", "/v1/catalog/items/oa", key, "", 200, "If-Match", `"2"`, "Idempotency-Key", "oa-d1")
	check(del, "DELETE", "/v1/catalog/items/oa?expected_version=9", key, "", 422, "Idempotency-Key", "oa-d1")
	check(del, "DELETE", "/v1/catalog/items/oa?expected_version=3", key, "", 404)
	check(del, "DELETE", "/v1/catalog/items/oa?expected_version=3", "", "", 401)

	const list = "GET /v1/catalog/items"
	check(list, "GET", "/v1/catalog/items?limit=2", key, "", 200)
	check(list, "GET", "/v1/catalog/items?limit=5000", key, "", 400)
	check(list, "GET", "/v1/catalog/items", "", "", 401)
	// A table without an updated-at column cannot be listed.
	noList := e.instance(instOpts{cfg: func(c *Config) { c.Table.UpdatedAtColumn = "" }})
	in = noList
	check(list, "GET", "/v1/catalog/items", key, "", 501)

	for op, codes := range doc {
		for _, c := range codes {
			if c != 503 && !seen[op][c] {
				t.Errorf("%s documents %d, which no request here provoked", op, c)
			}
		}
	}
	t.Logf("%d requests, every answer documented", n)
}
