// Package clitest holds the flag test both binaries run on their own
// commands: every field a command's configs can report is set by a flag,
// and the error names that flag.
package clitest

import (
	"errors"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/cmd/internal/cli"
	"github.com/tidemark/tidemark/internal/config"
)

// EveryValidatedFieldHasAFlag: for every command of root that binds its
// flags, every field that the Validate of one of its configs (a field of
// the command with a Validate method) can report is set by a flag, directly
// or derived, so the error a user sees names the flag ("--request-timeout
// (TIDEMARK_REQUEST_TIMEOUT): must be positive") and never a Go field.
// Fields are found by breaking each one in turn (zero, negative, huge,
// malformed) in the command's defaults. fixed lists, by "command
// config.Field", the fields no flag sets (left at the package default).
func EveryValidatedFieldHasAFlag(t *testing.T, root any, fixed []string) {
	t.Helper()
	cmds, err := cli.Commands(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(cmds) == 0 {
		t.Fatal("no command binds its flags")
	}
	used := map[string]bool{}
	for _, c := range cmds {
		for _, cfg := range configsOf(reflect.ValueOf(c.Cmd).Elem()) {
			for _, field := range reportable(t, cfg.value) {
				path := cfg.name + "." + field
				key := c.Path + " " + path
				if slices.Contains(fixed, key) {
					used[key] = true
					if c.Binder.FlagOf(path) != nil {
						t.Errorf("%s: %s is listed as fixed, but a flag sets it", c.Path, path)
					}
					continue
				}
				if c.Binder.FlagOf(path) == nil {
					t.Errorf("tidemark %s: %s.Validate can report %s, but no flag sets it (bind one, or derive the field from one)", c.Path, cfg.name, path)
					continue
				}
				msg := c.Binder.Words(&config.FieldError{Field: path, Problem: "is wrong"}).Error()
				if !strings.HasPrefix(msg, "--") || !strings.HasSuffix(msg, ": is wrong") {
					t.Errorf("tidemark %s: an error of %s reads %q, not naming its flag", c.Path, path, msg)
				}
			}
		}
	}
	for _, k := range fixed {
		if !used[k] {
			t.Errorf("fixed field %q is reported by no command's config", k)
		}
	}
}

var validator = reflect.TypeFor[interface{ Validate() error }]()

type namedConfig struct {
	name  string
	value any // the command's defaults
}

// configsOf are the configs a command holds (its fields, and those of the
// structs it embeds, with a Validate method), by field name.
func configsOf(v reflect.Value) []namedConfig {
	var out []namedConfig
	for i := range v.NumField() {
		sf, f := v.Type().Field(i), v.Field(i)
		if f.Kind() != reflect.Struct {
			continue
		}
		if sf.Anonymous {
			out = append(out, configsOf(f)...)
			continue
		}
		if f.Type().Implements(validator) {
			out = append(out, namedConfig{sf.Name, reflect.NewAt(f.Type(), f.Addr().UnsafePointer()).Elem().Interface()})
		}
	}
	return out
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
	record(validate(base))
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

// EveryVariableMeansOneThing: an environment variable two commands read is
// either one flag defined once (the same name and help in each, as the
// connection groups bind them) or listed in shared, the variables that
// name one thing for the whole deployment (its Postgres, its topic). Any
// other would let a variable set for one process (a systemd
// EnvironmentFile, a chart's common env) change another's setting of the
// same name and a different meaning: such a flag takes a command's own
// variable (TIDEMARK_<COMMAND>_<NAME>, Flag.Env).
func EveryVariableMeansOneThing(t *testing.T, root any, shared []string) {
	t.Helper()
	by := map[string][]FlagUse{}
	for _, u := range FlagUses(t, root) {
		for _, env := range u.Envs {
			by[env] = append(by[env], u)
		}
	}
	used := map[string]bool{}
	for env, uses := range by {
		if len(uses) < 2 {
			continue
		}
		if slices.Contains(shared, env) {
			used[env] = true
			continue
		}
		for _, u := range uses[1:] {
			if u.Flag != uses[0].Flag || u.Help != uses[0].Help {
				t.Errorf("%s is read by `%s --%s` and `%s --%s`, two settings: give each command its own variable (Flag.Env), or list it as shared if it names one thing for the deployment",
					env, uses[0].Command, uses[0].Flag, u.Command, u.Flag)
				break
			}
		}
	}
	for _, env := range shared {
		if !used[env] {
			t.Errorf("shared variable %s is read by fewer than two commands", env)
		}
	}
}

// FlagUse is one flag of one command: its name, help and variables.
type FlagUse struct {
	Command, Flag, Help string
	Envs                []string
}

// FlagUses are the flags of every command of root that binds its flags.
func FlagUses(t *testing.T, root any) []FlagUse {
	t.Helper()
	cmds, err := cli.Commands(root)
	if err != nil {
		t.Fatal(err)
	}
	var out []FlagUse
	for _, c := range cmds {
		for _, f := range c.Binder.Flags() {
			out = append(out, FlagUse{Command: c.Path, Flag: f.Name, Help: f.Help, Envs: f.Envs})
		}
	}
	return out
}
