// Package cli is what the two binaries share: the product's tidemark and
// the lab's tidemark-lab. It parses a command line with kong, each flag
// bound once into the config field it sets with the package's default
// (bind.go), reads a YAML config file and *_FILE variables, words config
// errors by flag, and runs the command with an injected logger. It holds
// the flag groups both binaries' commands bind (Kafka, Redis, cache tier,
// catalog table); it never imports the lab.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/signal"
	"strings"
	"syscall"

	"github.com/alecthomas/kong"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/telemetry"
)

// Exit codes: 0 success, 1 runtime failure (or, for status, a verdict other
// than OK), 2 wrong or missing flags.
const (
	ExitFailure    = 1
	ExitUsage      = 2
	ExitUnreadable = 2 // status/inspect: the state could not be read
)

// Globals are the flags every command of both binaries takes; a binary's
// root struct embeds them.
type Globals struct {
	LogFormat   string `name:"log-format" env:"TIDEMARK_LOG_FORMAT" default:"text" help:"Log format: text or json."`
	LogLevel    string `name:"log-level" env:"TIDEMARK_LOG_LEVEL" default:"info" help:"Log level: debug, info, warn, error."`
	Config      string `name:"config" env:"TIDEMARK_CONFIG" type:"path" help:"YAML config file: keys are flag names (session-timeout) or the fields they fill (applier.SessionTimeout); flags and environment win over it."`
	PrintConfig bool   `name:"print-config" help:"Print the command's effective configuration (secrets redacted) with where each value came from, and exit."`

	file    *configFile // the loaded --config, for where a value came from
	fileEnv *fileEnv    // the *_FILE variables, likewise
	bound   *bindings   // the commands' bound flags
}

// Validate runs before every command's own checks.
func (g *Globals) Validate(kctx *kong.Context) error {
	return secretGivenTwice(kctx, g.file, g.fileEnv, g.bound)
}

// Env is what every command gets: the logger and the process streams.
type Env struct {
	Log    *slog.Logger
	Stdout io.Writer
	Stderr io.Writer

	files map[string]string // flag name -> the *_FILE path its value came from
}

// File is the file flag's value was read from (its TIDEMARK_X_FILE
// variable), or "" when it came from elsewhere. Stages given the path read
// it again for every new connection, so a rotated secret is picked up.
func (e *Env) File(flag string) string { return e.files[flag] }

// App is one binary: its name and description and its root command struct
// (embedding Globals, reached through globals).
type App struct {
	Name        string
	Description string
	Root        any
	Globals     *Globals
}

// Main parses args for app, runs the command and returns the exit code.
func Main(ctx context.Context, app App, args []string, stdout, stderr io.Writer) int {
	var (
		exited   bool
		exitCode int
	)
	bs := newBindings()
	app.Globals.bound = bs
	opts := []kong.Option{bs.option()} // each command's flags bound into its configs
	var cf *configFile
	if path := configPath(args); path != "" {
		var err error
		if cf, err = loadConfigFile(path); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", app.Name, err)
			return ExitUsage
		}
		cf.bound = bs
		opts = append(opts, kong.Resolvers(cf))
		app.Globals.file = cf
	}
	fe := &fileEnv{}
	app.Globals.fileEnv = fe
	opts = append(opts, kong.Resolvers(fe)) // after the config file's: a *_FILE variable wins over it
	parser, err := kong.New(app.Root, append(opts,
		kong.Name(app.Name),
		kong.Description(app.Description),
		kong.Writers(stdout, stderr),
		kong.Exit(func(code int) { exited, exitCode = true, code }),
	)...)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", app.Name, err)
		return ExitFailure
	}
	fe.flagEnvs = newFileEnv(parser.Model).flagEnvs
	if cf != nil { // before parsing, so a misspelt key is the error seen first
		if err := cf.Validate(parser.Model); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", app.Name, err)
			return ExitUsage
		}
	}
	kctx, err := parser.Parse(args)
	if exited { // --help
		return exitCode
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n(see %s --help)\n", app.Name, err, app.Name)
		return ExitUsage
	}
	if b := bs.byNode[kctx.Selected()]; b != nil {
		if err := b.check(); err != nil {
			fmt.Fprintf(stderr, "%s: %s: %v\n(see %s --help)\n", app.Name, kctx.Selected().Path(), err, app.Name)
			return ExitUsage
		}
	}
	if app.Globals.PrintConfig {
		if cf == nil {
			cf = &configFile{bound: bs}
		}
		printConfig(stdout, kctx, cf, fe)
		return 0
	}
	log, err := telemetry.NewLogger(stderr, app.Globals.LogFormat, app.Globals.LogLevel)
	if err != nil {
		var ferr *config.FieldError
		if errors.As(err, &ferr) {
			err = fmt.Errorf("--log-%s (TIDEMARK_LOG_%s): %s", strings.ToLower(ferr.Field), strings.ToUpper(ferr.Field), ferr.Problem) // Format, Level
		}
		fmt.Fprintf(stderr, "%s: %v\n", app.Name, err)
		return ExitUsage
	}
	cache.RedisLogger(log)
	stopProfile, err := startProfile()
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", app.Name, err)
		return ExitUsage
	}
	defer stopProfile()
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	kctx.BindTo(ctx, (*context.Context)(nil))
	err = kctx.Run(&Env{Log: log, Stdout: stdout, Stderr: stderr, files: fe.files(kctx)})
	var ec exitCoder
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ec):
		if msg := err.Error(); msg != "" {
			fmt.Fprintf(stderr, "%s: %s\n", app.Name, msg)
		}
		return ec.ExitCode()
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		return 0 // interrupted: the stages have shut down in order
	default:
		log.Error("exiting", "err", err)
		return ExitFailure
	}
}

// exitCoder lets a command choose its exit code (status uses 1 and 2).
type exitCoder interface {
	error
	ExitCode() int
}

// ExitError carries an exit code and a message printed as is.
type ExitError struct {
	Code int
	Msg  string
}

func (e *ExitError) Error() string { return e.Msg }
func (e *ExitError) ExitCode() int { return e.Code }

// UsageError reports flag problems found after parsing (config validation):
// printed once, exit 2.
func UsageError(err error) error {
	return &ExitError{Code: ExitUsage, Msg: err.Error() + "\n(see --help)"}
}
