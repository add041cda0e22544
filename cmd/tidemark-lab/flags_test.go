package main

import (
	"testing"

	"github.com/tidemark/tidemark/cmd/internal/cli/clitest"
)

// Every field a harness's configs can report is set by a flag, and the
// error names it.
func TestEveryValidatedFieldHasAFlag(t *testing.T) {
	clitest.EveryValidatedFieldHasAFlag(t, &root{}, []string{
		"kafka broker.SealedSyncInterval", "kafka broker.SegmentBytes",
		"chaos chaos.Tenants", "chaos chaos.LabBinary",
		"bench serve serve.Binary", "bench e2e e2e.Binary", "bench e2e e2e.LabBinary", "bench warm warm.Binary",
		"bench hotkey hotkey.Binary", "bench scan scan.Binary", "bench reads reads.Binary",
	})
}

// A variable two lab commands read means the same thing in both: the
// servers to run against, and the lab broker's fsync.
func TestEveryVariableMeansOneThing(t *testing.T) {
	clitest.EveryVariableMeansOneThing(t, &root{}, []string{"TIDEMARK_PG", "TIDEMARK_KAFKA", "TIDEMARK_REDIS", "TIDEMARK_KAFKA_SYNC_WRITES"})
}
