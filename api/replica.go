package api

import (
	"hash/maphash"
	"net/http"
)

// readerSeed makes the copy a connection reads differ between processes, so
// many processes' connections spread over every copy.
var readerSeed = maphash.MakeSeed()

// readerHash is the stable hash a read picks its copy by: the client
// connection, so one connection keeps reading one copy (and the next one on
// retry) while connections spread evenly.
func readerHash(r *http.Request) uint64 { return maphash.String(readerSeed, r.RemoteAddr) }
