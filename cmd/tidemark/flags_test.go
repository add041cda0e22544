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
