package main

import (
	"testing"

	"github.com/tidemark/tidemark/cmd/internal/cli/clitest"
)

// Every field a command's configs can report is set by a flag, and the
// error names it.
func TestEveryValidatedFieldHasAFlag(t *testing.T) {
	clitest.EveryValidatedFieldHasAFlag(t, &root{}, []string{
		"serve trace.BatchTimeout", "capture trace.BatchTimeout", "apply trace.BatchTimeout",
		"serve audit.Batch", "serve audit.SLO", "serve audit.Window", "serve audit.LeaseTTL",
		"serve warm.Workers", "serve warm.SlowFactor", "serve warm.Collapse", "serve warm.StepEvery", "serve warm.CheckEvery", "serve warm.LeaseTTL", "serve warm.HotSetWait",
		"serve replica.AutoFactor", "serve replica.MaxReplicas", "serve replica.MaxKeys", "serve replica.Interval", "serve replica.RenewBefore",
	})
}

// A variable that two commands read means the same thing in both: the
// deployment's servers and the names its processes share. The rest are one
// flag defined once, or each command's own (TIDEMARK_CAPTURE_LINGER and
// TIDEMARK_APPLY_LINGER, not one TIDEMARK_LINGER for two settings).
func TestEveryVariableMeansOneThing(t *testing.T) {
	clitest.EveryVariableMeansOneThing(t, &root{}, []string{
		"TIDEMARK_PG", "TIDEMARK_KAFKA", "TIDEMARK_REDIS", // the deployment's servers
		"TIDEMARK_TOPIC", "TIDEMARK_GROUP", "TIDEMARK_SLOT", "TIDEMARK_PUBLICATION", // its pipeline's names
		"TIDEMARK_NAMESPACE", "TIDEMARK_SOURCE_POOL", "TIDEMARK_SLO", // its cache tier's
	})
}
