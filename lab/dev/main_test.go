package dev

import (
	"testing"

	"github.com/tidemark/tidemark/lab/testenv"
)

// Every test here starts its own servers and processes and spends most of
// its time waiting on them, so they run in parallel (go test's -parallel,
// GOMAXPROCS at a time): one after another, the package was the last of
// make test's test-go to end, alone on a core that was otherwise idle.
func TestMain(m *testing.M) { testenv.Main(m) }
