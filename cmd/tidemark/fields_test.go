package main

import (
	"errors"
	"reflect"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/tidemark/tidemark/api"
	"github.com/tidemark/tidemark/applier"
	"github.com/tidemark/tidemark/audit"
	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/capture"
	"github.com/tidemark/tidemark/inspect"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/telemetry"
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
	"github.com/tidemark/tidemark/replica"
	"github.com/tidemark/tidemark/status"
	"github.com/tidemark/tidemark/warm"
)

// validated is one config a command validates, under the name its flags'
// field tags use.
type validated struct {
	name     string
	defaults any      // the package's DefaultConfig()
	fixed    []string // fields the command leaves at the package default (no flag sets them)
}

// Every field a package's Validate can report, for every command that
// validates that config, is filled by a flag of the command (its field tag),
// so no error ever names a field instead of a flag, or a flag that does not
// exist. Fields are found by breaking each one in turn (zero, negative,
// malformed) in the package's defaults.
func TestEveryValidatedFieldHasAFlag(t *testing.T) {
	page := validated{"page", status.DefaultPageConfig(), nil}
	tracing := validated{"trace", telemetry.DefaultTraceConfig(), []string{"BatchTimeout"}}
	commands := []struct {
		name    string
		cmd     any
		configs []validated
	}{
		{"capture", &captureCmd{}, []validated{{"capture", capture.DefaultConfig(), nil}, page, tracing}},
		{"apply", &applyCmd{}, []validated{{"applier", applier.DefaultConfig(), nil}, {"cache", cache.DefaultConfig(), nil}, page, tracing}},
		{"replay", &replayCmd{}, []validated{{"replay", withSince(applier.DefaultReplayConfig()), nil}, {"cache", cache.DefaultConfig(), nil}}},
		{"serve", &serveCmd{}, []validated{{"api", api.DefaultConfig(), nil}, {"cache", cache.DefaultConfig(), nil}, page, tracing,
			{"audit", audit.DefaultConfig(), []string{"Table", "Batch", "SLO", "Window", "LeaseTTL"}},
			{"warm", warm.DefaultConfig(), []string{"Workers", "SlowFactor", "Collapse", "StepEvery", "CheckEvery", "LeaseTTL", "HotSetWait"}},
			{"replica", replica.DefaultConfig(), []string{"AutoFactor", "MaxReplicas", "MaxKeys", "Interval", "RenewBefore"}}}},
		{"status", &statusCmd{}, []validated{{"status", status.DefaultConfig(), nil}}},
		{"inspect", &inspectCmd{}, []validated{{"inspect", inspect.DefaultConfig(), nil}}},
		{"kafka", &kafkaCmd{}, []validated{{"broker", broker.DefaultConfig(), []string{"SealedSyncInterval", "SegmentBytes"}}}},
		{"dev", &devCmd{}, []validated{{"dev", dev.DefaultConfig(), nil}}},
		{"chaos", &chaosCmd{}, []validated{{"chaos", chaos.DefaultConfig(), []string{"Tenants"}}}},
		{"bench cache", &benchCacheCmd{}, []validated{{"benchcache", cachebench.DefaultConfig(), nil}}},
		{"bench apply", &benchApplyCmd{}, []validated{{"benchapply", applybench.DefaultConfig(), nil}}},
		{"bench serve", &benchServeCmd{}, []validated{{"benchserve", servebench.DefaultConfig(), []string{"Binary"}}}},
		{"bench e2e", &benchE2ECmd{}, []validated{{"e2e", e2ebench.DefaultConfig(), []string{"Binary"}}}},
		{"bench warm", &benchWarmCmd{}, []validated{{"benchwarm", warmbench.DefaultConfig(), []string{"Binary"}}}},
		{"bench hotkey", &benchHotkeyCmd{}, []validated{{"benchhotkey", hotkeybench.DefaultConfig(), []string{"Binary"}}}},
		{"bench scan", &benchScanCmd{}, []validated{{"benchscan", scanbench.DefaultConfig(), []string{"Binary"}}}},
		{"bench capture", &benchCaptureCmd{}, []validated{{"benchcapture", capturebench.DefaultConfig(), nil}}},
		{"bench memory", &benchMemoryCmd{}, []validated{{"benchmemory", memorybench.DefaultConfig(), nil}}},
	}
	for _, c := range commands {
		flags := fieldFlags(c.cmd)
		for _, v := range c.configs {
			for _, f := range reportable(t, v.defaults) {
				if _, ok := flags[v.name+"."+f]; !ok && !slices.Contains(v.fixed, f) {
					t.Errorf("tidemark %s: %s.Validate can report %s, but no flag has field:%q", c.name, v.name, f, v.name+"."+f)
				}
			}
			for _, f := range v.fixed {
				if _, ok := flags[v.name+"."+f]; ok {
					t.Errorf("tidemark %s: %s.%s is listed as fixed but a flag sets it", c.name, v.name, f)
				}
			}
		}
	}
}

// The field tags name fields that exist, so a rename cannot leave a flag
// mapped to nothing.
func TestFieldTagsNameRealFields(t *testing.T) {
	types := map[string]reflect.Type{}
	for name, cfg := range defaultConfigs() {
		types[name] = reflect.TypeOf(cfg)
	}
	for _, cmd := range []any{&captureCmd{}, &applyCmd{}, &replayCmd{}, &serveCmd{}, &statusCmd{}, &inspectCmd{}, &kafkaCmd{}, &devCmd{},
		&adoptCmd{}, &chaosCmd{}, &benchCacheCmd{}, &benchApplyCmd{}, &benchServeCmd{}, &benchE2ECmd{}, &benchWarmCmd{}, &benchHotkeyCmd{}, &benchScanCmd{}, &benchCaptureCmd{}, &benchMemoryCmd{}} {
		for field := range fieldFlags(cmd) {
			name, path, ok := cut(field)
			if !ok {
				continue // a field of the command itself (--redis, --max-procs)
			}
			typ, known := types[name]
			if !known {
				t.Errorf("%T: field tag %q names no config", cmd, field)
				continue
			}
			for _, p := range splitPath(path) {
				sf, ok := typ.FieldByName(p)
				if !ok {
					t.Errorf("%T: field tag %q: %s has no field %s", cmd, field, typ, p)
					break
				}
				typ = sf.Type
			}
		}
	}
}

// A field error is worded with its flag; two configs reporting the same
// flag's problem say it once.
func TestFlagErrorsWordWithFlags(t *testing.T) {
	var p config.Problems
	p.Add("api.RequestTimeout", "must be positive (got 0s)")
	p.Add("api.Namespace", "must not be empty")
	p.Add("cache.Namespace", "must not be empty")
	got := flagErrors(&serveCmd{}, p.Err()).Error()
	want := "--request-timeout (TIDEMARK_REQUEST_TIMEOUT): must be positive (got 0s)\n--namespace (TIDEMARK_NAMESPACE): must not be empty"
	if got != want {
		t.Errorf("flagErrors =\n%s\nwant\n%s", got, want)
	}
}

func withSince(c applier.ReplayConfig) applier.ReplayConfig {
	c.Brokers, c.Since = []string{"k:9092"}, time.Now().Add(-time.Minute)
	return c
}

// reportable breaks each field of defaults in turn and returns every field
// the config's Validate reports.
func reportable(t *testing.T, defaults any) []string {
	t.Helper()
	validate := func(v reflect.Value) error {
		return v.Interface().(interface{ Validate() error }).Validate()
	}
	base := reflect.ValueOf(defaults)
	seen := map[string]bool{}
	record := func(err error) {
		for _, fe := range config.Fields(err) {
			seen[fe.Field] = true
		}
		for _, e := range unjoin(err) {
			var fe *config.FieldError
			if e != nil && !errors.As(e, &fe) {
				t.Errorf("%T.Validate reports %q, not as a config.FieldError", defaults, e)
			}
		}
	}
	record(validate(reflect.Zero(base.Type())))
	var leaves [][]int
	var walk func(typ reflect.Type, idx []int)
	walk = func(typ reflect.Type, idx []int) {
		for i := 0; i < typ.NumField(); i++ {
			sf := typ.Field(i)
			if !sf.IsExported() {
				continue
			}
			path := append(slices.Clone(idx), i)
			if sf.Type.Kind() == reflect.Struct && sf.Type != reflect.TypeOf(time.Time{}) {
				walk(sf.Type, path)
				continue
			}
			leaves = append(leaves, path)
		}
	}
	walk(base.Type(), nil)
	for _, path := range leaves {
		for _, bad := range badValues(base.FieldByIndex(path).Type()) {
			v := reflect.New(base.Type()).Elem()
			v.Set(base)
			v.FieldByIndex(path).Set(bad)
			record(validate(v))
		}
	}
	var out []string
	for f := range seen {
		out = append(out, f)
	}
	sort.Strings(out)
	return out
}

// badValues are the values that break a field of type typ: zero, negative,
// huge, malformed.
func badValues(typ reflect.Type) []reflect.Value {
	var out []reflect.Value
	add := func(x any) { out = append(out, reflect.ValueOf(x).Convert(typ)) }
	out = append(out, reflect.Zero(typ))
	switch typ.Kind() {
	case reflect.Int, reflect.Int32, reflect.Int64:
		add(-1)
		add(1 << 30)
	case reflect.Float64:
		add(-1.0)
		add(1e12)
	case reflect.String:
		add("{bad value}")
	case reflect.Slice:
		if typ.Elem().Kind() == reflect.Int32 {
			out = append(out, reflect.ValueOf([]int32{-1}).Convert(typ))
		}
	case reflect.Bool:
		add(true)
	case reflect.Struct: // time.Time
		out = append(out, reflect.ValueOf(time.Now().Add(time.Hour)))
	}
	return out
}

func cut(field string) (name, path string, ok bool) {
	for i := 0; i < len(field); i++ {
		if field[i] == '.' {
			return field[:i], field[i+1:], true
		}
	}
	return "", field, false
}

func splitPath(p string) []string {
	var out []string
	for {
		a, b, ok := cut(p)
		if !ok {
			return append(out, b)
		}
		out, p = append(out, a), b
	}
}
