package api

import (
	_ "embed"
	"net/http"
	"strconv"
)

// openAPI is the API's contract, served at /v1/openapi.json. The tests hold
// it to the routes and status codes the handlers return.
//
//go:embed openapi.json
var openAPI []byte

func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(openAPI)))
	w.Write(openAPI)
}
