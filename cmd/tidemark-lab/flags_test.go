package main

import (
	"testing"

	"github.com/tidemark/tidemark/cmd/internal/cli/clitest"
	"github.com/tidemark/tidemark/lab/bench/applybench"
	"github.com/tidemark/tidemark/lab/bench/cachebench"
	"github.com/tidemark/tidemark/lab/bench/capturebench"
	"github.com/tidemark/tidemark/lab/bench/e2ebench"
	"github.com/tidemark/tidemark/lab/bench/hotkeybench"
	"github.com/tidemark/tidemark/lab/bench/memorybench"
	"github.com/tidemark/tidemark/lab/bench/scanbench"
	"github.com/tidemark/tidemark/lab/bench/servebench"
	"github.com/tidemark/tidemark/lab/bench/warmbench"
	"github.com/tidemark/tidemark/lab/broker"
	"github.com/tidemark/tidemark/lab/chaos"
	"github.com/tidemark/tidemark/lab/dev"
)

// binary is tidemark-lab's command line for the flag tests of clitest.
var binary = clitest.Binary{NewRoot: func() any { return &root{} }, Defaults: labDefaults(), ConfigsOf: configsOf}

func TestEveryFlagReachesItsField(t *testing.T) { clitest.EveryFlagReachesItsField(t, binary) }

func TestFlagDefaultsComeFromPackages(t *testing.T) {
	clitest.FlagDefaultsComeFromPackages(t, &root{}, labDefaults())
}

func TestFieldTagsNameRealFields(t *testing.T) {
	clitest.FieldTagsNameRealFields(t, labDefaults(), []any{&kafkaCmd{}, &devCmd{}, &chaosCmd{}, &benchCacheCmd{}, &benchApplyCmd{},
		&benchServeCmd{}, &benchE2ECmd{}, &benchWarmCmd{}, &benchHotkeyCmd{}, &benchScanCmd{}, &benchCaptureCmd{}, &benchMemoryCmd{}})
}

// Every field a harness's Validate can report is filled by a flag.
func TestEveryValidatedFieldHasAFlag(t *testing.T) {
	clitest.EveryValidatedFieldHasAFlag(t, []clitest.ValidatedCommand{
		{"kafka", &kafkaCmd{}, []clitest.Validated{{"broker", broker.DefaultConfig(), []string{"SealedSyncInterval", "SegmentBytes"}}}},
		{"dev", &devCmd{}, []clitest.Validated{{"dev", dev.DefaultConfig(), nil}}},
		{"chaos", &chaosCmd{}, []clitest.Validated{{"chaos", chaos.DefaultConfig(), []string{"Tenants", "LabBinary"}}}},
		{"bench cache", &benchCacheCmd{}, []clitest.Validated{{"benchcache", cachebench.DefaultConfig(), nil}}},
		{"bench apply", &benchApplyCmd{}, []clitest.Validated{{"benchapply", applybench.DefaultConfig(), nil}}},
		{"bench serve", &benchServeCmd{}, []clitest.Validated{{"benchserve", servebench.DefaultConfig(), []string{"Binary"}}}},
		{"bench e2e", &benchE2ECmd{}, []clitest.Validated{{"e2e", e2ebench.DefaultConfig(), []string{"Binary", "LabBinary"}}}},
		{"bench warm", &benchWarmCmd{}, []clitest.Validated{{"benchwarm", warmbench.DefaultConfig(), []string{"Binary"}}}},
		{"bench hotkey", &benchHotkeyCmd{}, []clitest.Validated{{"benchhotkey", hotkeybench.DefaultConfig(), []string{"Binary"}}}},
		{"bench scan", &benchScanCmd{}, []clitest.Validated{{"benchscan", scanbench.DefaultConfig(), []string{"Binary"}}}},
		{"bench capture", &benchCaptureCmd{}, []clitest.Validated{{"benchcapture", capturebench.DefaultConfig(), nil}}},
		{"bench memory", &benchMemoryCmd{}, []clitest.Validated{{"benchmemory", memorybench.DefaultConfig(), nil}}},
	})
}

// configsOf are the configs a lab command builds from its flags, by the
// name their field tags use.
func configsOf(cmd any) map[string]any {
	switch c := cmd.(type) {
	case *kafkaCmd:
		return map[string]any{"broker": c.config()}
	case *devCmd:
		return map[string]any{"dev": c.config()}
	case *chaosCmd:
		return map[string]any{"chaos": c.config(), "table": c.CatalogTable()}
	case *benchCacheCmd:
		return map[string]any{"benchcache": c.config()}
	case *benchApplyCmd:
		return map[string]any{"benchapply": c.config()}
	case *benchServeCmd:
		return map[string]any{"benchserve": c.config()}
	case *benchE2ECmd:
		return map[string]any{"e2e": c.config()}
	case *benchWarmCmd:
		return map[string]any{"benchwarm": c.config()}
	case *benchHotkeyCmd:
		return map[string]any{"benchhotkey": c.config()}
	case *benchScanCmd:
		return map[string]any{"benchscan": c.config()}
	case *benchCaptureCmd:
		return map[string]any{"benchcapture": c.config()}
	case *benchMemoryCmd:
		return map[string]any{"benchmemory": c.config()}
	}
	return nil
}
