package hotset_test

import (
	"testing"

	"github.com/tidemark/tidemark/lab/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
