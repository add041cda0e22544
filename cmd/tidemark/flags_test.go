package main

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kong"

	"github.com/tidemark/tidemark/internal/telemetry"
	"github.com/tidemark/tidemark/promise"
)

// command is one leaf command of the CLI as kong sees it: the words that
// select it and its flags (the struct's own and the embedded ones).
type command struct {
	path  []string
	node  *kong.Node
	flags []*kong.Flag
}

// commands lists every leaf command of the CLI, so a new command is covered
// by the tests below without being added to them.
func commands(t *testing.T, c *cli) (*kong.Kong, []command) {
	t.Helper()
	parser, err := kong.New(c, packageDefaults(defaultVars()), kong.Exit(func(int) { t.Fatal("kong exited") }))
	if err != nil {
		t.Fatal(err)
	}
	var out []command
	var walk func(n *kong.Node, path []string)
	walk = func(n *kong.Node, path []string) {
		if n.Type == kong.CommandNode {
			path = append(slices.Clone(path), n.Name)
		}
		if n.Leaf() && n.Type == kong.CommandNode {
			out = append(out, command{path: path, node: n, flags: n.Flags})
			return
		}
		for _, ch := range n.Children {
			walk(ch, path)
		}
	}
	walk(parser.Model.Node, nil)
	return parser, out
}

// configsOf are the configs a command builds from its flags, by the name
// their field tags use, built the way its Validate and Run build them. A
// command with field-tagged flags must be listed here (the round-trip test
// says so).
func configsOf(cmd any) map[string]any {
	switch c := cmd.(type) {
	case *captureCmd:
		return map[string]any{"capture": c.config(), "redis": c.redisConn(c.Redis), "page": c.pageConfig(c.target()), "table": c.table(),
			"trace": c.traceConfig("", telemetry.Pipeline{})}
	case *applyCmd:
		return map[string]any{"applier": c.config(), "cache": c.cacheConfig(), "redis": c.redisConn(c.Redis), "page": c.pageConfig(c.target()),
			"trace": c.traceConfig("", telemetry.Pipeline{})}
	case *replayCmd:
		cfg, _ := c.config()
		return map[string]any{"replay": cfg, "cache": c.cacheConfig(), "redis": c.redisConn(c.Redis)}
	case *serveCmd:
		return map[string]any{"api": c.apiConfig(), "cache": c.cacheConfig(), "audit": c.auditConfig(), "warm": c.warmConfig(),
			"replica": c.replicaConfig(), "redis": c.redisConn(c.Redis), "page": c.pageConfig(c.target()), "table": c.table(),
			"trace": c.traceConfig("", telemetry.Pipeline{})}
	case *statusCmd:
		return map[string]any{"status": c.config(), "redis": c.redisConn(c.Redis)}
	case *inspectCmd:
		return map[string]any{"inspect": c.config(), "redis": c.redisConn(c.Redis), "table": c.table()}
	case *warmCmd:
		return map[string]any{"redis": c.redisConn(c.Redis)}
	case *adoptCmd:
		return map[string]any{"adopt": c.config(), "table": c.table()}
	case *rolloutSetCmd:
		return map[string]any{"redis": c.redisConn(c.Redis)}
	case *rolloutStatusCmd:
		return map[string]any{"redis": c.redisConn(c.Redis)}
	case *kafkaCmd:
		return map[string]any{"broker": c.config()}
	case *devCmd:
		return map[string]any{"dev": c.config()}
	case *chaosCmd:
		return map[string]any{"chaos": c.config(), "table": c.table()}
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

// fieldValue reads the field a tag names ("Relay.Require.Retention") in cfg.
func fieldValue(cfg any, path string) (reflect.Value, bool) {
	v := reflect.ValueOf(cfg)
	for _, p := range splitPath(path) {
		if v.Kind() != reflect.Struct {
			return reflect.Value{}, false
		}
		v = v.FieldByName(p)
		if !v.IsValid() {
			return reflect.Value{}, false
		}
	}
	return v, true
}

// A flag whose field has a package default takes it from the package
// (default:"${api_RequestTimeout}"), never as a literal copy that can drift;
// and no flag spells out one of the promise's shared names.
func TestFlagDefaultsComeFromPackages(t *testing.T) {
	_, cmds := commands(t, &cli{})
	defaults := defaultConfigs()
	shared := []string{promise.Namespace, promise.Table, promise.Topic, promise.Group, promise.Slot, promise.Publication}
	for _, c := range cmds {
		for _, f := range c.flags {
			def := f.Tag.Get("default")
			if def == "" || strings.HasPrefix(def, "${") {
				continue
			}
			if slices.Contains(shared, def) {
				t.Errorf("tidemark %s --%s: default:%q spells out a shared name; take it from its package's DefaultConfig (promise)",
					strings.Join(c.path, " "), f.Name, def)
			}
			for _, field := range strings.Split(f.Tag.Get("field"), ",") {
				name, path, ok := cut(strings.TrimSpace(field))
				if !ok {
					continue
				}
				v, ok := fieldValue(defaults[name], path)
				if ok && !v.IsZero() {
					t.Errorf("tidemark %s --%s: default:%q is a literal, but %s has a package default (%v): use default:\"${%s_%s}\"",
						strings.Join(c.path, " "), f.Name, def, field, v.Interface(), name, strings.ReplaceAll(path, ".", "_"))
				}
			}
		}
	}
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

// parsedArgs are the values of string flags the command parses further.
var parsedArgs = map[string]string{"replay --since": "17m"}

// distinct is a value for a flag of type typ, the nth of a command, that no
// other flag of the command has and that differs from the flag's default:
// its command-line form and the value.
func distinct(typ reflect.Type, n int, def reflect.Value) (string, reflect.Value) {
	switch {
	case typ == reflect.TypeOf(time.Duration(0)):
		d := time.Duration(n)*time.Second + 7*time.Millisecond
		return d.String(), reflect.ValueOf(d)
	case typ.Kind() == reflect.String:
		s := fmt.Sprintf("v%d", n)
		return s, reflect.ValueOf(s).Convert(typ)
	case typ.Kind() == reflect.Int, typ.Kind() == reflect.Int64:
		x := 7000 + n
		return fmt.Sprint(x), reflect.ValueOf(x).Convert(typ)
	case typ.Kind() == reflect.Float64:
		x := 7000.5 + float64(n)
		return fmt.Sprint(x), reflect.ValueOf(x)
	case typ.Kind() == reflect.Bool:
		return "", reflect.ValueOf(!def.Bool())
	case typ.Kind() == reflect.Slice && typ.Elem().Kind() == reflect.Float64:
		x := []float64{float64(n) + 0.5, float64(n) + 1000.5}
		return fmt.Sprintf("%v,%v", x[0], x[1]), reflect.ValueOf(x)
	case typ.Kind() == reflect.Slice && typ.Elem().Kind() == reflect.String:
		x := []string{fmt.Sprintf("v%d", n), fmt.Sprintf("w%d", n)}
		return x[0] + "," + x[1], reflect.ValueOf(x)
	case typ.Kind() == reflect.Slice && typ.Elem().Kind() == reflect.Int32:
		return fmt.Sprintf("%d,%d", n, n+1000), reflect.ValueOf([]int32{int32(n), int32(n + 1000)})
	case typ.Kind() == reflect.Slice && typ.Elem().Kind() == reflect.Int:
		return fmt.Sprintf("%d,%d", n, n+1000), reflect.ValueOf([]int{n, n + 1000})
	}
	panic(fmt.Sprintf("distinct: no value for a flag of type %s", typ))
}

// Every field-tagged flag of every command reaches every field its tag
// names: each flag is set to a value of its own, the command line parsed,
// and each tagged field of the configs the command builds must hold it. A
// hand copy left out (the bug that once dropped bench warm --svg) fails here.
func TestEveryFlagReachesItsField(t *testing.T) {
	_, cmds := commands(t, &cli{})
	for _, c := range cmds {
		name := strings.Join(c.path, " ")
		tagged := 0
		for _, f := range c.flags {
			if f.Tag.Get("field") != "" {
				tagged++
			}
		}
		if tagged == 0 {
			continue
		}
		t.Run(name, func(t *testing.T) {
			var root cli
			parser, leaves := commands(t, &root)
			var leaf command
			for _, l := range leaves {
				if slices.Equal(l.path, c.path) {
					leaf = l
				}
			}
			args := slices.Clone(c.path)
			want := map[*kong.Flag]reflect.Value{}
			for i, f := range leaf.flags {
				if f.Tag.Get("field") == "" {
					continue
				}
				arg, v := distinct(f.Target.Type(), i+1, f.Target)
				if a, ok := parsedArgs[name+" --"+f.Name]; ok {
					arg, v = a, reflect.ValueOf(a)
				}
				switch {
				case f.Target.Kind() != reflect.Bool:
					args = append(args, "--"+f.Name+"="+arg)
				case v.Bool():
					args = append(args, "--"+f.Name)
				default:
					args = append(args, "--no-"+f.Name) // negatable, default true
				}
				want[f] = v
			}
			// The command's Validate may refuse the odd values; the flags
			// are applied before it runs, which is all this test reads.
			_, perr := parser.Parse(args)
			cmd := leaf.node.Target.Addr().Interface()
			configs := configsOf(cmd) // none: its tags name only its own fields (migrate's --pg)
			for f, v := range want {
				if !reflect.DeepEqual(f.Target.Interface(), v.Interface()) {
					t.Errorf("--%s was not parsed: holds %v, want %v (parse: %v)", f.Name, f.Target.Interface(), v.Interface(), perr)
					continue
				}
				reached := false
				for _, field := range strings.Split(f.Tag.Get("field"), ",") {
					field = strings.TrimSpace(field)
					cfgName, path, ok := cut(field)
					if !ok {
						reached = true // a field of the command itself, read where it is used
						continue
					}
					cfg, built := configs[cfgName]
					if !built {
						continue // a config this command does not build (cacheFlags' applier.HardLifetime in serve)
					}
					reached = true
					got, ok := fieldValue(cfg, path)
					if !ok {
						t.Errorf("--%s: field:%q names no field of %T", f.Name, field, cfg)
						continue
					}
					exp := expected(got.Type(), v)
					if d, ok := derived[name+" "+field]; ok {
						exp = d(cmd, v)
					}
					if !reflect.DeepEqual(got.Interface(), exp) {
						t.Errorf("--%s=%v does not reach %s: it holds %v", f.Name, v.Interface(), field, got.Interface())
					}
				}
				if !reached {
					t.Errorf("--%s: field:%q names no config the command builds", f.Name, f.Tag.Get("field"))
				}
			}
		})
	}
}

// expected is flag value v as a field of type typ holds it: a
// comma-separated flag as a list, a number as the field's number type.
func expected(typ reflect.Type, v reflect.Value) any {
	if typ.Kind() == reflect.Slice && v.Kind() == reflect.String {
		return splitList(v.String())
	}
	if v.Type().ConvertibleTo(typ) && typ.Kind() != reflect.String {
		return v.Convert(typ).Interface()
	}
	return v.Interface()
}
