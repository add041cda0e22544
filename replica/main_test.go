package replica_test

import (
	"testing"

	"tidemark/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
