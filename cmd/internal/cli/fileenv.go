package cli

import (
	"fmt"
	"os"
	"strings"

	"github.com/alecthomas/kong"

	"github.com/tidemark/tidemark/internal/secretfile"
)

// fileEnvSuffix: every flag's environment variable TIDEMARK_X can be given
// as TIDEMARK_X_FILE, the path of a file holding the value (a Kubernetes
// Secret mounted as a volume), so a DSN or a URL with a password sits in
// neither argv nor the environment. A variable that is itself a flag's
// (TIDEMARK_REDIS_PASSWORD_FILE is --redis-password-file's) keeps that
// meaning: the flag reads the file itself, at each connection. The value is
// read here at start (for validation and --print-config); a command hands
// the path to the stages that connect (Env.File), which read it again for
// every new connection.
const fileEnvSuffix = "_FILE"

// fileEnv resolves a flag from its *_FILE variable. It runs after the
// config file's resolver, so the file's content wins over the config file;
// a flag on the command line wins over both.
type fileEnv struct {
	flagEnvs map[string]bool // every flag's own variables
}

func newFileEnv(app *kong.Application) *fileEnv {
	fe := &fileEnv{flagEnvs: map[string]bool{}}
	var walk func(n *kong.Node)
	walk = func(n *kong.Node) {
		for _, f := range n.Flags {
			for _, e := range f.Envs {
				fe.flagEnvs[e] = true
			}
		}
		for _, c := range n.Children {
			walk(c)
		}
	}
	walk(app.Node)
	return fe
}

// fileVar is the *_FILE variable set for flag, if any.
func (fe *fileEnv) fileVar(flag *kong.Flag) (name, path string, ok bool) {
	for _, env := range flag.Envs {
		name := env + fileEnvSuffix
		if fe.flagEnvs[name] {
			continue
		}
		if path, ok := os.LookupEnv(name); ok {
			return name, path, true
		}
	}
	return "", "", false
}

func (fe *fileEnv) Validate(*kong.Application) error { return nil }

// Resolve reads the file named by flag's *_FILE variable; one trailing
// newline (what an editor or `kubectl create secret --from-file` leaves) is
// not part of the value. Setting both TIDEMARK_X and TIDEMARK_X_FILE is
// refused: which one is meant cannot be told.
func (fe *fileEnv) Resolve(_ *kong.Context, _ *kong.Path, flag *kong.Flag) (any, error) {
	name, path, ok := fe.fileVar(flag)
	if !ok {
		return nil, nil
	}
	for _, env := range flag.Envs {
		if _, set := os.LookupEnv(env); set {
			return nil, fmt.Errorf("both %s and %s are set: give one", env, name)
		}
	}
	v, err := secretfile.Read(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if strings.TrimSpace(v) == "" {
		return nil, fmt.Errorf("%s: %s is empty", name, path)
	}
	return v, nil
}

// files is where each flag of the selected command that got its value from
// a *_FILE variable got it: flag name -> path.
func (fe *fileEnv) files(kctx *kong.Context) map[string]string {
	fromArgs := map[*kong.Flag]bool{}
	for _, p := range kctx.Path {
		if p.Flag != nil && !p.Resolved {
			fromArgs[p.Flag] = true
		}
	}
	out := map[string]string{}
	for _, f := range kctx.Flags() {
		if fromArgs[f] {
			continue
		}
		if _, path, ok := fe.fileVar(f); ok {
			out[f.Name] = path
		}
	}
	return out
}
