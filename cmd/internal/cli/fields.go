package cli

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"time"

	"github.com/alecthomas/kong"

	"github.com/tidemark/tidemark/adopt"
	"github.com/tidemark/tidemark/api"
	"github.com/tidemark/tidemark/applier"
	"github.com/tidemark/tidemark/audit"
	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/capture"
	"github.com/tidemark/tidemark/catalog"
	"github.com/tidemark/tidemark/inspect"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/telemetry"
	"github.com/tidemark/tidemark/relay"
	"github.com/tidemark/tidemark/replica"
	"github.com/tidemark/tidemark/status"
	"github.com/tidemark/tidemark/warm"
)

// Packages report configuration problems by Go field (config.FieldError);
// the command owns the wording users see. A flag that fills a config field
// says which in its tag, `field:"api.RequestTimeout"` (several: comma
// separated), where the prefix names the config the command validates under
// that name (see validateAs). flagErrors rewrites each field error into the
// flag's terms; TestEveryValidatedFieldHasAFlag holds every field a Validate
// can report to having such a flag.

// validateAs collects the field errors of one config under name ("api").
func ValidateAs(p *config.Problems, name string, err error) { p.Nested(name, err) }

// validateOne is Validate for a command whose flags fill one config, err
// its Validate, with its fields named name.Field.
func ValidateOne(cmd any, name string, err error) error {
	var p config.Problems
	ValidateAs(&p, name, err)
	return FlagErrors(cmd, p.Err())
}

// flagErrors words every field error of err with the flag of cmd that fills
// the field: "--request-timeout: must be positive (got 0s)". Other errors
// are kept as they are.
func FlagErrors(cmd any, err error) error {
	if err == nil {
		return nil
	}
	flags := FieldFlags(cmd)
	var lines []string
	for _, e := range Unjoin(err) {
		msg := e.Error()
		var fe *config.FieldError
		if errors.As(e, &fe) {
			if f, ok := flags[fe.Field]; ok {
				msg = f + ": " + fe.Problem
			}
		}
		if !contains(lines, msg) { // two configs may check one flag (--namespace)
			lines = append(lines, msg)
		}
	}
	return errors.New(strings.Join(lines, "\n"))
}

// fieldFlags maps "api.RequestTimeout" to "--request-timeout (TIDEMARK_REQUEST_TIMEOUT)"
// for every flag of cmd (a pointer to a kong command struct) with a field tag.
func FieldFlags(cmd any) map[string]string {
	out := map[string]string{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for i := 0; i < t.NumField(); i++ {
			sf := t.Field(i)
			if sf.Anonymous && sf.Type.Kind() == reflect.Struct {
				walk(sf.Type)
				continue
			}
			fields, name := sf.Tag.Get("field"), sf.Tag.Get("name")
			if fields == "" || name == "" {
				continue
			}
			flag := "--" + name
			if env := sf.Tag.Get("env"); env != "" {
				flag += " (" + env + ")"
			}
			for _, f := range strings.Split(fields, ",") {
				out[strings.TrimSpace(f)] = flag
			}
		}
	}
	walk(reflect.TypeOf(cmd).Elem())
	return out
}

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

// ProductDefaults are the product packages' defaults that flags take
// theirs from, by the name their field tags use; a binary adds its own
// (the lab's harnesses) before handing them to Main.
func ProductDefaults() map[string]any {
	return map[string]any{
		"capture": capture.DefaultConfig(), "applier": applier.DefaultConfig(), "replay": applier.DefaultReplayConfig(),
		"cache": cache.DefaultConfig(), "redis": cache.DefaultRedisConfig(), "api": api.DefaultConfig(), "status": status.DefaultConfig(),
		"inspect": inspect.DefaultConfig(),
		"require": relay.DefaultTopicRequirements(), // capture.Relay.Require when left zero
		"table":   catalog.DefaultTable(), "adopt": adopt.DefaultConfig(),
		"page": status.DefaultPageConfig(), "audit": audit.DefaultConfig(), "warm": warm.DefaultConfig(),
		"replica": replica.DefaultConfig(),
		"trace":   telemetry.DefaultTraceConfig(),
	}
}

// defaultVars are the package defaults as kong variables, so a flag says
// default:"${api_RequestTimeout}" and the value has one source: the
// package's DefaultConfig. Names are the field tag with '.' as '_'.
func defaultVars(defaults map[string]any) kong.Vars {
	vars := kong.Vars{}
	for name, cfg := range defaults {
		var walk func(prefix string, v reflect.Value)
		walk = func(prefix string, v reflect.Value) {
			for i := 0; i < v.NumField(); i++ {
				sf := v.Type().Field(i)
				if !sf.IsExported() {
					continue
				}
				key := prefix + "_" + sf.Name
				f := v.Field(i)
				if sf.Anonymous && f.Kind() == reflect.Struct { // an embedded config's fields are the outer one's
					walk(prefix, f)
					continue
				}
				switch x := f.Interface().(type) {
				case time.Duration:
					vars[key] = x.String()
				case time.Time:
				default:
					if f.Kind() == reflect.Slice { // kong reads lists comma-separated
						parts := make([]string, f.Len())
						for j := range parts {
							parts[j] = fmt.Sprint(f.Index(j).Interface())
						}
						vars[key] = strings.Join(parts, ",")
						continue
					}
					if f.Kind() == reflect.Struct {
						walk(key, f)
						continue
					}
					vars[key] = fmt.Sprint(x)
				}
			}
		}
		walk(name, reflect.ValueOf(cfg))
	}
	return vars
}

// Defaults is the kong option that fills each flag's default:"${name}"
// from defaults (ProductDefaults and a binary's own).
func Defaults(defaults map[string]any) kong.Option { return packageDefaults(defaultVars(defaults)) }

// packageDefaults fills each flag's default:"${name}" from vars before kong
// interpolates. Given to kong as variables instead, every variable would be
// interpolated for every flag of every command (flags times variables): each
// start of tidemark cost 0.25 s of CPU, and 5 s under the race detector.
func packageDefaults(vars kong.Vars) kong.Option {
	return kong.PostBuild(func(k *kong.Kong) error {
		return kong.Visit(k.Model.Node, func(node kong.Visitable, next kong.Next) error {
			v, ok := node.(*kong.Value)
			if !ok || !strings.Contains(v.Default, "${") {
				return next(nil)
			}
			var missing error
			v.Default = varRef.ReplaceAllStringFunc(v.Default, func(ref string) string {
				name := varRef.FindStringSubmatch(ref)[1]
				val, ok := vars[name]
				if !ok {
					missing = fmt.Errorf("default value for %s: undefined variable ${%s}", v.Summary(), name)
				}
				return val
			})
			return next(missing)
		})
	})
}

// varRef is a package default's reference, as in default:"${api_RequestTimeout}".
var varRef = regexp.MustCompile(`\$\{([[:alpha:]_][[:word:]]*)\}`)

// SplitList splits a comma-separated flag value (--kafka), dropping empty parts.
func SplitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
