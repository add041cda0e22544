package main

import (
	"reflect"
	"testing"
	"time"

	"github.com/tidemark/tidemark/api"
	"github.com/tidemark/tidemark/applier"
	"github.com/tidemark/tidemark/audit"
	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/capture"
	"github.com/tidemark/tidemark/cmd/internal/cli"
	"github.com/tidemark/tidemark/cmd/internal/cli/clitest"
	"github.com/tidemark/tidemark/inspect"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/telemetry"
	"github.com/tidemark/tidemark/lab/chaos"
	"github.com/tidemark/tidemark/lab/dev"
	"github.com/tidemark/tidemark/replica"
	"github.com/tidemark/tidemark/status"
	"github.com/tidemark/tidemark/warm"
)

// binary is tidemark's command line for the flag tests of clitest.
var binary = clitest.Binary{
	NewRoot:    func() any { return &root{} },
	Defaults:   cli.ProductDefaults(),
	ConfigsOf:  configsOf,
	Derived:    derived,
	ParsedArgs: map[string]string{"replay --since": "17m"},
}

func TestEveryFlagReachesItsField(t *testing.T) { clitest.EveryFlagReachesItsField(t, binary) }

func TestFlagDefaultsComeFromPackages(t *testing.T) {
	clitest.FlagDefaultsComeFromPackages(t, &root{}, cli.ProductDefaults())
}

// The shared flag groups also fill the lab's chaos and dev configs
// (tidemark-lab embeds them), so their tags are checked against those too.
func TestFieldTagsNameRealFields(t *testing.T) {
	defaults := cli.ProductDefaults()
	defaults["chaos"], defaults["dev"] = chaos.DefaultConfig(), dev.DefaultConfig()
	clitest.FieldTagsNameRealFields(t, defaults, []any{&captureCmd{}, &applyCmd{}, &replayCmd{}, &serveCmd{}, &statusCmd{},
		&inspectCmd{}, &adoptCmd{}, &warmCmd{}, &rolloutSetCmd{}, &rolloutStatusCmd{}})
}

func TestEveryValidatedFieldHasAFlag(t *testing.T) {
	page := clitest.Validated{"page", status.DefaultPageConfig(), nil}
	tracing := clitest.Validated{"trace", telemetry.DefaultTraceConfig(), []string{"BatchTimeout"}}
	clitest.EveryValidatedFieldHasAFlag(t, []clitest.ValidatedCommand{
		{"capture", &captureCmd{}, []clitest.Validated{{"capture", capture.DefaultConfig(), nil}, page, tracing}},
		{"apply", &applyCmd{}, []clitest.Validated{{"applier", applier.DefaultConfig(), nil}, {"cache", cache.DefaultConfig(), nil}, page, tracing}},
		{"replay", &replayCmd{}, []clitest.Validated{{"replay", withSince(applier.DefaultReplayConfig()), nil}, {"cache", cache.DefaultConfig(), nil}}},
		{"serve", &serveCmd{}, []clitest.Validated{{"api", api.DefaultConfig(), nil}, {"cache", cache.DefaultConfig(), nil}, page, tracing,
			{"audit", audit.DefaultConfig(), []string{"Table", "Batch", "SLO", "Window", "LeaseTTL"}},
			{"warm", warm.DefaultConfig(), []string{"Workers", "SlowFactor", "Collapse", "StepEvery", "CheckEvery", "LeaseTTL", "HotSetWait"}},
			{"replica", replica.DefaultConfig(), []string{"AutoFactor", "MaxReplicas", "MaxKeys", "Interval", "RenewBefore"}}}},
		{"status", &statusCmd{}, []clitest.Validated{{"status", status.DefaultConfig(), nil}}},
		{"inspect", &inspectCmd{}, []clitest.Validated{{"inspect", inspect.DefaultConfig(), nil}}},
	})
}

// A field error is worded with its flag; two configs reporting the same
// flag's problem say it once.
func TestFlagErrorsWordWithFlags(t *testing.T) {
	var p config.Problems
	p.Add("api.RequestTimeout", "must be positive (got 0s)")
	p.Add("api.Namespace", "must not be empty")
	p.Add("cache.Namespace", "must not be empty")
	got := cli.FlagErrors(&serveCmd{}, p.Err()).Error()
	want := "--request-timeout (TIDEMARK_REQUEST_TIMEOUT): must be positive (got 0s)\n--namespace (TIDEMARK_NAMESPACE): must not be empty"
	if got != want {
		t.Errorf("flagErrors =\n%s\nwant\n%s", got, want)
	}
}

func withSince(c applier.ReplayConfig) applier.ReplayConfig {
	c.Brokers, c.Since = []string{"k:9092"}, time.Now().Add(-time.Minute)
	return c
}

// configsOf are the configs a command builds from its flags, by the name
// their field tags use, built the way its Validate and Run build them. A
// command with field-tagged flags must be listed here (the round-trip test
// says so).
func configsOf(cmd any) map[string]any {
	switch c := cmd.(type) {
	case *captureCmd:
		return map[string]any{"capture": c.config(), "redis": c.RedisConn(c.Redis), "page": c.pageConfig(c.target()), "table": c.CatalogTable(),
			"trace": c.traceConfig("", telemetry.Pipeline{})}
	case *applyCmd:
		return map[string]any{"applier": c.config(), "cache": c.cacheConfig(), "redis": c.RedisConn(c.Redis), "page": c.pageConfig(c.target()),
			"trace": c.traceConfig("", telemetry.Pipeline{})}
	case *replayCmd:
		cfg, _ := c.config()
		return map[string]any{"replay": cfg, "cache": c.cacheConfig(), "redis": c.RedisConn(c.Redis)}
	case *serveCmd:
		return map[string]any{"api": c.apiConfig(), "cache": c.cacheConfig(), "audit": c.auditConfig(), "warm": c.warmConfig(),
			"replica": c.replicaConfig(), "redis": c.RedisConn(c.Redis), "page": c.pageConfig(c.target()), "table": c.CatalogTable(),
			"trace": c.traceConfig("", telemetry.Pipeline{})}
	case *statusCmd:
		return map[string]any{"status": c.config(), "redis": c.RedisConn(c.Redis)}
	case *inspectCmd:
		return map[string]any{"inspect": c.config(), "redis": c.RedisConn(c.Redis), "table": c.CatalogTable()}
	case *warmCmd:
		return map[string]any{"redis": c.RedisConn(c.Redis)}
	case *adoptCmd:
		return map[string]any{"adopt": c.config(), "table": c.CatalogTable()}
	case *rolloutSetCmd:
		return map[string]any{"redis": c.RedisConn(c.Redis)}
	case *rolloutStatusCmd:
		return map[string]any{"redis": c.RedisConn(c.Redis)}
	}
	return nil
}

// derived are the tagged fields a command computes from its flag instead of
// copying it, with what they must hold for the flag's value (cmd is the
// parsed command).
var derived = map[string]func(cmd any, flag reflect.Value) any{
	// The warmer starts at an eighth of the background budget and steps by
	// an eighth (wiring.PaceWarm).
	"serve warm.StartRate": func(_ any, v reflect.Value) any { return v.Float() / 8 },
	"serve warm.Step":      func(_ any, v reflect.Value) any { return v.Float() / 8 },
	// --since is a duration back from the time Validate fixed.
	"replay replay.Since": func(cmd any, v reflect.Value) any {
		d, _ := time.ParseDuration(v.String())
		return cmd.(*replayCmd).now.Add(-d)
	},
}
