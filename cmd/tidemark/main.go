// Command tidemark is the single binary of the tidemark pipeline. Each
// subcommand only wires flags and environment into package configs and runs
// the stages; the logic lives in the packages.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/alecthomas/kong"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/internal/telemetry"
)

// Exit codes: 0 success, 1 runtime failure (or, for status, a verdict other
// than OK), 2 wrong or missing flags.
const (
	exitFailure    = 1
	exitUsage      = 2
	exitUnreadable = 2 // status/inspect: the state could not be read
)

type cli struct {
	LogFormat   string `field:"Format" name:"log-format" env:"TIDEMARK_LOG_FORMAT" default:"text" help:"Log format: text or json."`
	LogLevel    string `field:"Level" name:"log-level" env:"TIDEMARK_LOG_LEVEL" default:"info" help:"Log level: debug, info, warn, error."`
	Config      string `name:"config" env:"TIDEMARK_CONFIG" type:"path" help:"YAML config file: keys are flag names (session-timeout) or the fields they fill (applier.SessionTimeout); flags and environment win over it."`
	PrintConfig bool   `name:"print-config" help:"Print the command's effective configuration (secrets redacted) with where each value came from, and exit."`

	Version     versionCmd     `cmd:"" help:"Print the version and exit."`
	Healthcheck healthcheckCmd `cmd:"" help:"GET a probe URL (/healthz, /readyz) and exit 0 on 2xx, 1 otherwise: an exec probe for the shell-less image."`
	Migrate     migrateCmd     `cmd:"" help:"Apply the catalog schema migrations to Postgres (idempotent)."`
	Adopt       adoptCmd       `cmd:"" help:"Prepare an existing catalog table for tidemark: replica identity, publication, version trigger, tidemark's own tables (idempotent; --dry-run prints the SQL)."`
	Kafka       kafkaCmd       `cmd:"" help:"Run an embedded Kafka broker (kfake), or with --real an Apache Kafka cluster, for local runs and manual testing. Production uses its own Kafka."`
	Capture     captureCmd     `cmd:"" help:"Stream committed catalog changes from Postgres logical replication to Kafka."`
	Apply       applyCmd       `cmd:"" help:"Consume the topic and apply invalidations and the freshness watermark to the Redis cache tier."`
	Replay      replayCmd      `cmd:"" help:"Re-apply the topic from a point in time to the cache tier (outside the consumer group)."`
	Serve       serveCmd       `cmd:"" help:"Serve the reference catalog API on top of the cache tier."`
	Apikey      apikeyCmd      `cmd:"" name:"apikey" help:"Manage API keys."`
	Dev         devCmd         `cmd:"" help:"Run the whole pipeline locally in one process with embedded defaults."`
	Status      statusCmd      `cmd:"" help:"Freshness gate: per-partition lag and watermark age; exit 0 OK, 1 AT RISK/BREACHED, 2 unreadable."`
	Warm        warmCmd        `cmd:"" help:"Ask the elected warmer of the serve processes to fill the hottest keys now."`
	Rollout     rolloutCmd     `cmd:"" help:"Per-tenant serving mode (source, shadow, cache with a ramp): set it at run time or show it with the shadow comparison's figures."`
	Inspect     inspectCmd     `cmd:"" help:"Staleness inspector: sample cached keys and compare them with Postgres."`
	Bench       benchCmd       `cmd:"" help:"Benchmarks against ceilings measured in the same run."`
	Chaos       chaosCmd       `cmd:"" help:"Run the pipeline under injected faults and check every answer against the source history; exit 0 only with zero violations."`

	file    *configFile // the loaded --config, for where a value came from
	fileEnv *fileEnv    // the *_FILE variables, likewise
}

// Validate runs before every command's own checks.
func (c *cli) Validate(kctx *kong.Context) error { return secretGivenTwice(kctx, c.file, c.fileEnv) }

// env is what every command gets: the logger and the process streams.
type env struct {
	log    *slog.Logger
	stdout io.Writer
	stderr io.Writer
}

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var (
		c        cli
		exited   bool
		exitCode int
	)
	opts := []kong.Option{}
	var cf *configFile
	if path := configPath(args); path != "" {
		var err error
		if cf, err = loadConfigFile(path); err != nil {
			fmt.Fprintf(stderr, "tidemark: %v\n", err)
			return exitUsage
		}
		opts = append(opts, kong.Resolvers(cf))
		c.file = cf
	}
	fe := &fileEnv{}
	c.fileEnv = fe
	opts = append(opts, kong.Resolvers(fe)) // after the config file's: a *_FILE variable wins over it
	parser, err := kong.New(&c, append(opts,
		kong.Name("tidemark"),
		kong.Description("tidemark keeps a multi-tenant catalog cache fresh: Postgres changes -> Kafka -> Redis invalidations, gated by a freshness watermark."),
		packageDefaults(defaultVars()), // flag defaults come from the packages' DefaultConfig
		kong.Writers(stdout, stderr),
		kong.Exit(func(code int) { exited, exitCode = true, code }),
	)...)
	if err != nil {
		fmt.Fprintf(stderr, "tidemark: %v\n", err)
		return exitFailure
	}
	fe.flagEnvs = newFileEnv(parser.Model).flagEnvs
	if cf != nil { // before parsing, so a misspelt key is the error seen first
		if err := cf.Validate(parser.Model); err != nil {
			fmt.Fprintf(stderr, "tidemark: %v\n", err)
			return exitUsage
		}
	}
	kctx, err := parser.Parse(args)
	if exited { // --help
		return exitCode
	}
	if err != nil {
		fmt.Fprintf(stderr, "tidemark: %v\n(see tidemark --help)\n", err)
		return exitUsage
	}
	if c.PrintConfig {
		if cf == nil {
			cf = &configFile{}
		}
		printConfig(stdout, kctx, cf, fe)
		return 0
	}
	log, err := telemetry.NewLogger(stderr, c.LogFormat, c.LogLevel)
	if err != nil {
		fmt.Fprintf(stderr, "tidemark: %v\n", flagErrors(&c, err))
		return exitUsage
	}
	cache.RedisLogger(log)
	stopProfile, err := startProfile()
	if err != nil {
		fmt.Fprintf(stderr, "tidemark: %v\n", err)
		return exitUsage
	}
	defer stopProfile()
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	kctx.BindTo(ctx, (*context.Context)(nil))
	err = kctx.Run(&env{log: log, stdout: stdout, stderr: stderr})
	var ec exitCoder
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ec):
		if msg := err.Error(); msg != "" {
			fmt.Fprintf(stderr, "tidemark: %s\n", msg)
		}
		return ec.ExitCode()
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		return 0 // interrupted: the stages have shut down in order
	default:
		log.Error("exiting", "err", err)
		return exitFailure
	}
}

// exitCoder lets a command choose its exit code (status uses 1 and 2).
type exitCoder interface {
	error
	ExitCode() int
}

// exitError carries an exit code and a message printed as is.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }
func (e *exitError) ExitCode() int { return e.code }

// usageError reports flag problems found after parsing (config validation):
// printed once, exit 2.
func usageError(err error) error {
	return &exitError{code: exitUsage, msg: err.Error() + "\n(see tidemark --help)"}
}
