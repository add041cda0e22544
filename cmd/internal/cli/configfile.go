package cli

import (
	"fmt"
	"io"
	"net/url"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strings"

	"github.com/alecthomas/kong"
	yaml "go.yaml.in/yaml/v3"
)

// A config file (--config FILE, TIDEMARK_CONFIG) is YAML whose keys are
// the flags' names ("session-timeout") or the config fields they fill, as
// the binder records them ("applier.SessionTimeout", nested or dotted).
// One file may serve every process of an environment: a key of another
// command is ignored by this one, a key no command knows is an error. A
// flag on the command line wins over its environment variable, which wins
// over the file, which wins over the default.

// fileValue is one key of the config file.
type fileValue struct {
	key   string
	value string
	line  int
}

// configFile is a loaded config file, a kong.Resolver.
type configFile struct {
	path  string
	keys  map[string]fileValue
	bound *bindings // which flag a field key sets
}

// configPath finds --config in args (before parsing: kong needs the
// resolver up front), else TIDEMARK_CONFIG.
func configPath(args []string) string {
	for i, a := range args {
		if a == "--" {
			break
		}
		if v, ok := strings.CutPrefix(a, "--config="); ok {
			return v
		}
		if a == "--config" && i+1 < len(args) {
			return args[i+1]
		}
	}
	return os.Getenv("TIDEMARK_CONFIG")
}

func loadConfigFile(path string) (*configFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	cf := &configFile{path: path, keys: map[string]fileValue{}}
	if len(doc.Content) == 0 {
		return cf, nil
	}
	if err := cf.flatten("", doc.Content[0]); err != nil {
		return nil, err
	}
	return cf, nil
}

func (cf *configFile) flatten(prefix string, n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("%s:%d: the config file must be a mapping of keys to values", cf.path, n.Line)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		key := k.Value
		if prefix != "" {
			key = prefix + "." + key
		}
		switch v.Kind {
		case yaml.MappingNode:
			if err := cf.flatten(key, v); err != nil {
				return err
			}
			continue
		case yaml.SequenceNode:
			var parts []string
			for _, e := range v.Content {
				if e.Kind != yaml.ScalarNode {
					return fmt.Errorf("%s:%d: %s: a list holds plain values only", cf.path, e.Line, key)
				}
				parts = append(parts, e.Value)
			}
			cf.keys[key] = fileValue{key, strings.Join(parts, ","), k.Line}
		case yaml.ScalarNode:
			if _, dup := cf.keys[key]; dup {
				return fmt.Errorf("%s:%d: %s is given twice", cf.path, k.Line, key)
			}
			cf.keys[key] = fileValue{key, v.Value, k.Line}
		default:
			return fmt.Errorf("%s:%d: %s: unsupported value", cf.path, k.Line, key)
		}
	}
	return nil
}

// lookup is the file's value for f: under its name, or a field it sets.
func (cf *configFile) lookup(f *kong.Flag) (fileValue, bool) {
	if v, ok := cf.keys[f.Name]; ok {
		return v, true
	}
	keys := make([]string, 0, len(cf.keys))
	for k := range cf.keys {
		keys = append(keys, k)
	}
	sort.Strings(keys) // the same key every time if two name f
	for _, k := range keys {
		if cf.bound.keyFlag(k, f) {
			return cf.keys[k], true
		}
	}
	return fileValue{}, false
}

// Validate refuses a key that no flag of any command takes.
func (cf *configFile) Validate(app *kong.Application) error {
	var bad []fileValue
	for _, v := range cf.keys {
		if !cf.bound.known(app, v.key) {
			bad = append(bad, v)
		}
	}
	sort.Slice(bad, func(i, j int) bool { return bad[i].line < bad[j].line })
	var msgs []string
	for _, v := range bad {
		msgs = append(msgs, fmt.Sprintf("%s:%d: unknown key %q (keys are flag names, such as session-timeout, or the fields they fill, such as applier.SessionTimeout)", cf.path, v.line, v.key))
	}
	if len(msgs) > 0 {
		return fmt.Errorf("%s", strings.Join(msgs, "\n"))
	}
	return nil
}

// Resolve gives flag its value from the file unless its environment
// variable is set (the environment wins over the file).
func (cf *configFile) Resolve(_ *kong.Context, _ *kong.Path, flag *kong.Flag) (any, error) {
	for _, env := range flag.Envs {
		if _, ok := os.LookupEnv(env); ok {
			return nil, nil
		}
	}
	v, ok := cf.lookup(flag)
	if !ok {
		return nil, nil
	}
	// Decode into a scratch value so a bad value is reported with the
	// file's line, not just the flag.
	scratch := reflect.New(flag.Target.Type()).Elem()
	if err := flag.Mapper.Decode(&kong.DecodeContext{Value: flag.Value, Scan: kong.Scan().PushTyped(v.value, kong.FlagValueToken)}, scratch); err != nil {
		return nil, fmt.Errorf("%s:%d: %s: %w", cf.path, v.line, v.key, err)
	}
	if flag.Enum != "" && !contains(strings.Split(flag.Enum, ","), v.value) {
		return nil, fmt.Errorf("%s:%d: %s: must be one of %s (got %q)", cf.path, v.line, v.key, flag.Enum, v.value)
	}
	return v.value, nil
}

// flagSources says where each flag of the selected command got its value:
// "flag --name", "env NAME", "file PATH:LINE" or "default".
func flagSources(kctx *kong.Context, cf *configFile, fe *fileEnv) map[*kong.Flag]string {
	fromArgs, fromFile := map[*kong.Flag]bool{}, map[*kong.Flag]bool{}
	for _, p := range kctx.Path {
		if p.Flag != nil {
			if p.Resolved {
				fromFile[p.Flag] = true
			} else {
				fromArgs[p.Flag] = true
			}
		}
	}
	out := map[*kong.Flag]string{}
	for _, f := range kctx.Flags() {
		src := "default"
		switch {
		case fromArgs[f]:
			src = "flag --" + f.Name
		case fromFile[f]:
			if name, _, ok := fe.fileVar(f); ok {
				src = "env " + name
				break
			}
			if cf == nil {
				break
			}
			if v, ok := cf.lookup(f); ok {
				src = fmt.Sprintf("file %s:%d", cf.path, v.line)
			}
		default:
			for _, env := range f.Envs {
				if _, ok := os.LookupEnv(env); ok {
					src = "env " + env
					break
				}
			}
		}
		out[f] = src
	}
	return out
}

// printConfig writes the effective configuration of the selected command:
// every flag's value and where it came from, secrets redacted.
func printConfig(w io.Writer, kctx *kong.Context, cf *configFile, fe *fileEnv) {
	sources := flagSources(kctx, cf, fe)
	fmt.Fprintf(w, "# tidemark %s: effective configuration (flag > env > file > default)\n", kctx.Command())
	for _, f := range kctx.Flags() {
		switch f.Name {
		case "help", "config", "print-config":
			continue
		}
		val := redactValue(f, f.Target, cf.bound)
		if k := f.Target.Kind(); k == reflect.String || k == reflect.Slice {
			val = yamlScalar(val)
		}
		fmt.Fprintf(w, "%s: %s # %s\n", f.Name, val, sources[f])
	}
}

// secretGivenTwice refuses a secret given both as a value and as a file
// (--x and --x-file, from any of flag, env and file): which one wins would
// be a guess, and a rotated file would silently not be used.
func secretGivenTwice(kctx *kong.Context, cf *configFile, fe *fileEnv, bs *bindings) error {
	byName := map[string]*kong.Flag{}
	for _, f := range kctx.Flags() {
		byName[f.Name] = f
	}
	sources := flagSources(kctx, cf, fe)
	var msgs []string
	for _, f := range kctx.Flags() {
		file := byName[f.Name+"-file"]
		if !bs.secret[f] || file == nil || f.Target.Kind() != reflect.String {
			continue
		}
		if f.Target.String() != "" && file.Target.String() != "" {
			msgs = append(msgs, fmt.Sprintf("--%s is given twice: as a value (%s) and as a file (--%s, %s); give one of them, preferably the file",
				f.Name, sources[f], file.Name, sources[file]))
		}
	}
	if len(msgs) > 0 {
		return fmt.Errorf("%s", strings.Join(msgs, "\n"))
	}
	return nil
}

var dsnPassword = regexp.MustCompile(`(?i)(password\s*=\s*)('[^']*'|\S+)`)

// redactValue shows a value, hiding secrets: secret flags, a URL's
// password, a DSN's password=.
func redactValue(f *kong.Flag, v reflect.Value, bs *bindings) string {
	var s string
	if v.Kind() == reflect.Slice {
		parts := make([]string, v.Len())
		for i := range parts {
			parts[i] = fmt.Sprint(v.Index(i).Interface())
		}
		s = strings.Join(parts, ",")
	} else {
		s = fmt.Sprint(v.Interface())
	}
	if s != "" && bs.secret[f] {
		return "<redacted>"
	}
	if u, err := url.Parse(s); err == nil && u.User != nil {
		if _, has := u.User.Password(); has {
			s = u.Redacted()
		}
	}
	return dsnPassword.ReplaceAllString(s, "${1}<redacted>")
}

func yamlScalar(s string) string {
	b, err := yaml.Marshal(s)
	if err != nil {
		return s
	}
	return strings.TrimSuffix(string(b), "\n")
}
