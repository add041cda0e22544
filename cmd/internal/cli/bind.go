package cli

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/alecthomas/kong"

	"github.com/tidemark/tidemark/internal/config"
)

// Each flag is bound once, in code, into the field it sets, the way
// Prometheus binds its flags: a command sets its configs to their packages'
// DefaultConfig() and binds each flag to a field of them,
//
//	c.api = api.DefaultConfig()
//	b.Flag(&c.api.RequestTimeout, "request-timeout", "Deadline of a GET.")
//
// The flag's default is the field's value at that moment, its environment
// variable TIDEMARK_REQUEST_TIMEOUT, and the field's path in the command
// ("api.RequestTimeout", found from the pointer) is recorded with it: a
// config.FieldError of that field is worded with the flag, and the path is
// also a config-file key. A field that must hold the same fact as a bound
// one is derived from it (Derive), not bound a second time.

// Binds is a command whose flags are bound in code.
type Binds interface{ Bind(b *Binder) }

// Checker is a command that checks its configuration after the flags are
// parsed and the derived fields copied; the field errors it returns are
// worded with their flags.
type Checker interface{ Check() error }

// Binder binds the flags of one command.
type Binder struct {
	all      *bindings
	node     *kong.Node
	root     reflect.Value         // the command struct
	fields   map[string]*kong.Flag // field path -> the flag bound to it
	derived  map[string]string     // field path -> the path it is derived from
	copies   []func()
	env      string // the prefix of Flag's environment variables ("": none)
	replaced []replacedEnv
	err      error
}

// Flag is a bound flag, for its options.
type Flag struct {
	f   *kong.Flag
	all *bindings
}

// Flag binds --name to *p, a field of the command (or of a config in it),
// with *p's current value as its default and TIDEMARK_<NAME> as its
// variable (see EnvPrefix).
func (b *Binder) Flag(p any, name, help string) *Flag {
	env := ""
	if b.env != "" {
		env = b.env + envName(name)
	}
	return b.bind(p, name, env, help)
}

// Flags are the command's flags, those of its parents included.
func (b *Binder) Flags() []*kong.Flag {
	var out []*kong.Flag
	for _, g := range b.node.AllFlags(false) {
		out = append(out, g...)
	}
	return out
}

// EnvPrefix sets the prefix of the variables of the flags bound after it:
// "TIDEMARK_" by default, "TIDEMARK_CHAOS_" for chaos, "" for none.
func (b *Binder) EnvPrefix(prefix string) { b.env = prefix }

// shared binds a flag of the shared groups, whose variable is TIDEMARK_<NAME>
// in every command.
func (b *Binder) shared(p any, name, help string) *Flag {
	return b.bind(p, name, "TIDEMARK_"+envName(name), help)
}

func (b *Binder) bind(p any, name, env, help string) *Flag {
	v := reflect.ValueOf(p)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		b.fail("--%s: bound to %T, not a pointer to a field", name, p)
		return &Flag{f: &kong.Flag{Value: &kong.Value{Tag: &kong.Tag{}}}, all: b.all}
	}
	for n := b.node; n != nil; n = n.Parent {
		for _, f := range n.Flags {
			if f.Name == name {
				b.fail("--%s is bound twice", name)
			}
		}
	}
	target := v.Elem()
	def := defaultString(target)
	tag := &kong.Tag{Name: name, Help: help, HasDefault: def != "", Default: def, Sep: ',', MapSep: ';'}
	if env != "" {
		tag.Envs = []string{env}
	}
	val := &kong.Value{Name: name, Help: help, OrigHelp: help, HasDefault: tag.HasDefault, Default: def,
		DefaultValue: reflect.New(target.Type()).Elem(), Mapper: b.all.reg.ForValue(target), Tag: tag, Target: target}
	if val.Mapper == nil {
		b.fail("--%s: no parser for a %s", name, target.Type())
	}
	f := &kong.Flag{Value: val, Envs: tag.Envs}
	val.Flag = f
	b.node.Flags = append(b.node.Flags, f)
	path, ok := b.path(target)
	if !ok {
		b.fail("--%s: its target is not a field of %s", name, b.root.Type())
	}
	b.fields[path] = f
	b.all.byFlag[f] = b
	return &Flag{f: f, all: b.all}
}

// Env replaces the flag's variable ("": none).
func (f *Flag) Env(name string) *Flag {
	f.f.Tag.Envs = nil
	if name != "" {
		f.f.Tag.Envs = []string{name}
	}
	f.f.Envs = f.f.Tag.Envs
	return f
}

// Replaces names the variable this flag read before it took its own (Env)
// because another command read that one for another setting: set, it is
// refused at start, naming the variable to set instead; never silently
// ignored, nor read.
func (f *Flag) Replaces(old string) *Flag {
	b := f.all.byFlag[f.f] // set by bind, which made f
	b.replaced = append(b.replaced, replacedEnv{old: old, flag: f.f})
	return f
}

// replacedEnv is a variable a flag no longer reads (Flag.Replaces).
type replacedEnv struct {
	old  string
	flag *kong.Flag
}

// Secret hides the value in --print-config, and refuses it given beside
// its --<name>-file twin.
func (f *Flag) Secret() *Flag { f.all.secret[f.f] = true; return f }

// Enum limits the value to one of the comma-separated values.
func (f *Flag) Enum(values string) *Flag { f.f.Enum, f.f.Tag.Enum = values, values; return f }

// Negatable adds --no-<name> for a flag that defaults to true.
func (f *Flag) Negatable() *Flag { f.f.Tag.Negatable = "_"; return f }

// Derive makes *dst a copy of *src (a bound field, or one derived from
// one) once the flags are parsed, before Check: two configs that hold one
// fact get it from one flag. A field error of dst is worded with src's
// flag; a struct copies whole (the table mapping), its fields worded alike.
func (b *Binder) Derive(dst, src any) {
	d, s := reflect.ValueOf(dst).Elem(), reflect.ValueOf(src).Elem()
	if d.Type() != s.Type() {
		b.fail("derive: %s from a %s", d.Type(), s.Type())
		return
	}
	b.Computed(dst, src)
	b.copies = append(b.copies, func() { d.Set(s) })
}

// Computed records that *dst is computed in code from *src (a bound
// field), for wording dst's field errors with src's flag.
func (b *Binder) Computed(dst, src any) {
	dp, ok1 := b.path(reflect.ValueOf(dst).Elem())
	sp, ok2 := b.path(reflect.ValueOf(src).Elem())
	if !ok1 || !ok2 {
		b.fail("derive: %T or %T is not a field of %s", dst, src, b.root.Type())
		return
	}
	b.derived[dp] = sp
}

func (b *Binder) fail(format string, args ...any) {
	b.err = errors.Join(b.err, fmt.Errorf("%s: "+format, append([]any{b.node.Path()}, args...)...))
}

// path is the path of target, a field of the command, from the command
// struct: "api.RequestTimeout". An embedded struct's fields are the outer
// one's, as config.Problems names them.
func (b *Binder) path(target reflect.Value) (string, bool) {
	addr := target.Addr().Pointer()
	var walk func(v reflect.Value, prefix string) (string, bool)
	walk = func(v reflect.Value, prefix string) (string, bool) {
		for i := 0; i < v.NumField(); i++ {
			sf, f := v.Type().Field(i), v.Field(i)
			name := prefix + sf.Name
			if sf.Anonymous {
				name = strings.TrimSuffix(prefix, ".")
			}
			if f.Addr().Pointer() == addr && f.Type() == target.Type() {
				return name, true
			}
			if f.Kind() == reflect.Struct && f.Type() != reflect.TypeOf(time.Time{}) {
				sub := name + "."
				if name == "" {
					sub = ""
				}
				if p, ok := walk(f, sub); ok {
					return p, true
				}
			}
		}
		return "", false
	}
	return walk(b.root, "")
}

// FlagOf is the flag that sets field (a path such as "api.RequestTimeout"),
// directly or through the fields derived from it; nil if none does.
func (b *Binder) FlagOf(field string) *kong.Flag {
	for range 8 { // derivations chain a few deep at most
		if f := b.fields[field]; f != nil {
			return f
		}
		from := ""
		for dst, src := range b.derived {
			if rest, ok := strings.CutPrefix(field, dst); ok && (rest == "" || rest[0] == '.') {
				from = src + rest
				break
			}
		}
		if from == "" {
			return nil
		}
		field = from
	}
	return nil
}

// Words rewrites every field error in err with the flag that sets the
// field: "--request-timeout (TIDEMARK_REQUEST_TIMEOUT): must be positive
// (got 0s)", each problem once. Other errors are kept as they are.
func (b *Binder) Words(err error) error {
	if err == nil {
		return nil
	}
	var lines []string
	for _, e := range Unjoin(err) {
		msg := e.Error()
		var fe *config.FieldError
		if errors.As(e, &fe) {
			if f := b.FlagOf(fe.Field); f != nil {
				msg = flagTitle(f) + ": " + fe.Problem
			}
		}
		if !contains(lines, msg) { // two configs may check one fact
			lines = append(lines, msg)
		}
	}
	return errors.New(strings.Join(lines, "\n"))
}

// flagTitle is how an error names f: "--redis (TIDEMARK_REDIS)".
func flagTitle(f *kong.Flag) string {
	s := "--" + f.Name
	if len(f.Envs) > 0 {
		s += " (" + f.Envs[0] + ")"
	}
	return s
}

// check refuses replaced variables, copies the derived fields and runs
// the command's Check.
func (b *Binder) check() error {
	var errs []error
	for _, r := range b.replaced {
		if _, set := os.LookupEnv(r.old); set {
			errs = append(errs, fmt.Errorf("--%s: %s is no longer read (each command that read it took it for a different setting): set %s instead",
				r.flag.Name, r.old, strings.Join(r.flag.Envs, ", ")))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	for _, c := range b.copies {
		c()
	}
	if c, ok := b.root.Addr().Interface().(Checker); ok {
		return b.Words(c.Check())
	}
	return nil
}

// bindings are every command's binders, made when the parser is built.
type bindings struct {
	reg    *kong.Registry
	byNode map[*kong.Node]*Binder
	byFlag map[*kong.Flag]*Binder
	secret map[*kong.Flag]bool
}

func newBindings() *bindings {
	reg := kong.NewRegistry().RegisterDefaults()
	reg.RegisterType(reflect.TypeOf([]string(nil)), kong.MapperFunc(func(ctx *kong.DecodeContext, target reflect.Value) error {
		var s string
		if err := ctx.Scan.PopValueInto("list", &s); err != nil {
			return err
		}
		target.Set(reflect.AppendSlice(target, reflect.ValueOf(SplitList(s))))
		return nil
	}))
	return &bindings{reg: reg, byNode: map[*kong.Node]*Binder{}, byFlag: map[*kong.Flag]*Binder{}, secret: map[*kong.Flag]bool{}}
}

// option binds the flags of every command that Binds, once kong has built
// the command tree.
func (bs *bindings) option() kong.Option {
	return kong.PostBuild(func(k *kong.Kong) error {
		var errs []error
		var walk func(n *kong.Node)
		walk = func(n *kong.Node) {
			if n.Type == kong.CommandNode && n.Target.CanAddr() {
				if c, ok := n.Target.Addr().Interface().(Binds); ok {
					b := &Binder{all: bs, node: n, root: n.Target, fields: map[string]*kong.Flag{}, derived: map[string]string{}, env: "TIDEMARK_"}
					c.Bind(b)
					bs.byNode[n] = b
					errs = append(errs, b.err)
				}
			}
			for _, ch := range n.Children {
				walk(ch)
			}
		}
		walk(k.Model.Node)
		return errors.Join(errs...)
	})
}

// keyFlag is the flag a config-file key sets among flags: its name, or a
// field it sets (directly or derived).
func (bs *bindings) keyFlag(key string, f *kong.Flag) bool {
	if key == f.Name {
		return true
	}
	b := bs.byFlag[f]
	return b != nil && b.FlagOf(key) == f
}

// known says whether key names a flag or a bound field of any command.
func (bs *bindings) known(app *kong.Application, key string) bool {
	for _, b := range bs.byNode {
		if b.FlagOf(key) != nil {
			return true
		}
	}
	found := false
	_ = kong.Visit(app.Node, func(n kong.Visitable, next kong.Next) error {
		if f, ok := n.(*kong.Flag); ok && f.Name == key {
			found = true
		}
		return next(nil)
	})
	return found
}

// Command is one leaf command with bound flags, for the tests.
type Command struct {
	Path   string // "rollout set"
	Cmd    any    // the command struct, its configs at their defaults
	Binder *Binder
}

// Commands builds root's command line and lists its commands that bind
// their flags.
func Commands(root any) ([]Command, error) {
	bs := newBindings()
	if _, err := kong.New(root, bs.option()); err != nil {
		return nil, err
	}
	var out []Command
	for n, b := range bs.byNode {
		out = append(out, Command{Path: n.Path(), Cmd: n.Target.Addr().Interface(), Binder: b})
	}
	return out, nil
}

// defaultString is v as a flag's default ("" for the zero value: no
// default), in the form its parser reads back.
func defaultString(v reflect.Value) string {
	if v.IsZero() {
		return ""
	}
	switch x := v.Interface().(type) {
	case time.Duration:
		return x.String()
	}
	if v.Kind() == reflect.Slice {
		parts := make([]string, v.Len())
		for i := range parts {
			parts[i] = fmt.Sprint(v.Index(i).Interface())
		}
		return strings.Join(parts, ",")
	}
	return fmt.Sprint(v.Interface())
}

// envName is a flag's name as a variable's: "request-timeout" ->
// "REQUEST_TIMEOUT".
func envName(flag string) string { return strings.ToUpper(strings.ReplaceAll(flag, "-", "_")) }

// Unjoin flattens errors.Join trees (a Validate's config.Problems) into
// their leaves.
func Unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, Unjoin(e)...)
		}
		return out
	}
	return []error{err}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// SplitList splits a comma-separated value, dropping spaces and empty parts.
func SplitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
