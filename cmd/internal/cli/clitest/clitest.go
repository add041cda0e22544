// Package clitest holds the flag tests both binaries run on their own
// commands: every validated field has a flag, every flag reaches its field,
// defaults come from the packages, field tags name real fields.
package clitest

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kong"

	"github.com/tidemark/tidemark/cmd/internal/cli"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/promise"
)

// Binary is one binary's command line as the flag tests need it.
type Binary struct {
	NewRoot  func() any     // a fresh root struct
	Defaults map[string]any // the package defaults its flags name
	// ConfigsOf are the configs a command builds from its flags, by the name
	// their field tags use, built the way its Validate and Run build them.
	ConfigsOf func(cmd any) map[string]any
	// Derived are the tagged fields a command computes from its flag instead
	// of copying it ("serve warm.StartRate"), with what they must hold.
	Derived map[string]func(cmd any, flag reflect.Value) any
	// ParsedArgs are values of string flags the command parses further
	// ("replay --since").
	ParsedArgs map[string]string
}

// Command is one leaf command of the CLI as kong sees it: the words that
// select it and its flags (the struct's own and the embedded ones).
type Command struct {
	Path  []string
	Node  *kong.Node
	Flags []*kong.Flag
}

// Commands lists every leaf command of root (a binary's root struct, its
// flag defaults from defaults), so a new command is covered by the tests
// without being added to them.
func Commands(t *testing.T, root any, defaults map[string]any) (*kong.Kong, []Command) {
	t.Helper()
	parser, err := kong.New(root, cli.Defaults(defaults), kong.Exit(func(int) { t.Fatal("kong exited") }))
	if err != nil {
		t.Fatal(err)
	}
	var out []Command
	var walk func(n *kong.Node, path []string)
	walk = func(n *kong.Node, path []string) {
		if n.Type == kong.CommandNode {
			path = append(slices.Clone(path), n.Name)
		}
		if n.Leaf() && n.Type == kong.CommandNode {
			out = append(out, Command{Path: path, Node: n, Flags: n.Flags})
			return
		}
		for _, ch := range n.Children {
			walk(ch, path)
		}
	}
	walk(parser.Model.Node, nil)
	return parser, out
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

// FlagDefaultsComeFromPackages: a flag whose field has a package default
// takes it from the package
// (default:"${api_RequestTimeout}"), never as a literal copy that can drift;
// and no flag spells out one of the promise's shared names.
func FlagDefaultsComeFromPackages(t *testing.T, root any, defaults map[string]any) {
	t.Helper()
	_, cmds := Commands(t, root, defaults)
	shared := []string{promise.Namespace, promise.Table, promise.Topic, promise.Group, promise.Slot, promise.Publication}
	for _, c := range cmds {
		for _, f := range c.Flags {
			def := f.Tag.Get("default")
			if def == "" || strings.HasPrefix(def, "${") {
				continue
			}
			if slices.Contains(shared, def) {
				t.Errorf("%s --%s: default:%q spells out a shared name; take it from its package's DefaultConfig (promise)",
					strings.Join(c.Path, " "), f.Name, def)
			}
			for _, field := range strings.Split(f.Tag.Get("field"), ",") {
				name, path, ok := cut(strings.TrimSpace(field))
				if !ok {
					continue
				}
				v, ok := fieldValue(defaults[name], path)
				if ok && !v.IsZero() {
					t.Errorf("%s --%s: default:%q is a literal, but %s has a package default (%v): use default:\"${%s_%s}\"",
						strings.Join(c.Path, " "), f.Name, def, field, v.Interface(), name, strings.ReplaceAll(path, ".", "_"))
				}
			}
		}
	}
}

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

// EveryFlagReachesItsField: every field-tagged flag of every command of b
// reaches every field its tag names: each flag is set to a value of its own, the command line parsed,
// and each tagged field of the configs the command builds must hold it. A
// hand copy left out (the bug that once dropped bench warm --svg) fails here.
func EveryFlagReachesItsField(t *testing.T, b Binary) {
	t.Helper()
	_, cmds := Commands(t, b.NewRoot(), b.Defaults)
	for _, c := range cmds {
		name := strings.Join(c.Path, " ")
		tagged := 0
		for _, f := range c.Flags {
			if f.Tag.Get("field") != "" {
				tagged++
			}
		}
		if tagged == 0 {
			continue
		}
		t.Run(name, func(t *testing.T) {
			parser, leaves := Commands(t, b.NewRoot(), b.Defaults)
			var leaf Command
			for _, l := range leaves {
				if slices.Equal(l.Path, c.Path) {
					leaf = l
				}
			}
			args := slices.Clone(c.Path)
			want := map[*kong.Flag]reflect.Value{}
			for i, f := range leaf.Flags {
				if f.Tag.Get("field") == "" {
					continue
				}
				arg, v := distinct(f.Target.Type(), i+1, f.Target)
				if a, ok := b.ParsedArgs[name+" --"+f.Name]; ok {
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
			cmd := leaf.Node.Target.Addr().Interface()
			configs := b.ConfigsOf(cmd) // none: its tags name only its own fields (migrate's --pg)
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
					if d, ok := b.Derived[name+" "+field]; ok {
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
		return cli.SplitList(v.String())
	}
	if v.Type().ConvertibleTo(typ) && typ.Kind() != reflect.String {
		return v.Convert(typ).Interface()
	}
	return v.Interface()
}

// Validated is one config a command validates, under the name its flags'
// field tags use.
// An alias of an unnamed struct, so the tests' tables can be positional.
type Validated = struct {
	Name     string
	Defaults any      // the package's DefaultConfig()
	Fixed    []string // fields the command leaves at the package default (no flag sets them)
}

// EveryValidatedFieldHasAFlag: every field a package's Validate can report, for every command that
// validates that config, is filled by a flag of the command (its field tag),
// so no error ever names a field instead of a flag, or a flag that does not
// exist. Fields are found by breaking each one in turn (zero, negative,
// malformed) in the package's defaults.
// ValidatedCommand is a command and the configs it validates.
type ValidatedCommand = struct {
	Name    string
	Cmd     any
	Configs []Validated
}

func EveryValidatedFieldHasAFlag(t *testing.T, commands []ValidatedCommand) {
	t.Helper()
	for _, c := range commands {
		flags := cli.FieldFlags(c.Cmd)
		for _, v := range c.Configs {
			for _, f := range reportable(t, v.Defaults) {
				if _, ok := flags[v.Name+"."+f]; !ok && !slices.Contains(v.Fixed, f) {
					t.Errorf("%s: %s.Validate can report %s, but no flag has field:%q", c.Name, v.Name, f, v.Name+"."+f)
				}
			}
			for _, f := range v.Fixed {
				if _, ok := flags[v.Name+"."+f]; ok {
					t.Errorf("%s: %s.%s is listed as fixed but a flag sets it", c.Name, v.Name, f)
				}
			}
		}
	}
}

// FieldTagsNameRealFields: the field tags name fields that exist, so a rename cannot leave a flag
// mapped to nothing.
func FieldTagsNameRealFields(t *testing.T, defaults map[string]any, cmds []any) {
	t.Helper()
	types := map[string]reflect.Type{}
	for name, cfg := range defaults {
		types[name] = reflect.TypeOf(cfg)
	}
	for _, cmd := range cmds {
		for field := range cli.FieldFlags(cmd) {
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
		for _, e := range cli.Unjoin(err) {
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
