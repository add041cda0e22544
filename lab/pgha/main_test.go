package pgha

import (
	"testing"

	"tidemark/lab/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
