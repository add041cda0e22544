// Command tidemark is the product binary of the tidemark pipeline: the
// commands an operator deploys and runs. Each subcommand only binds its
// flags into package configs (cli.Binder) and runs the stages; the logic
// lives in the packages. The lab (local servers, benchmarks, chaos) is the
// separate tidemark-lab binary; nothing here imports it.
package main

import (
	"context"
	"io"
	"os"

	"github.com/tidemark/tidemark/cmd/internal/cli"
)

// root is tidemark's command line.
type root struct {
	cli.Globals

	Version     versionCmd     `cmd:"" help:"Print the version and exit."`
	Healthcheck healthcheckCmd `cmd:"" help:"GET a probe URL (/healthz, /readyz) and exit 0 on 2xx, 1 otherwise: an exec probe for the shell-less image."`
	Migrate     migrateCmd     `cmd:"" help:"Apply the catalog schema migrations to Postgres (idempotent)."`
	Adopt       adoptCmd       `cmd:"" help:"Prepare an existing catalog table for tidemark: replica identity, publication, version trigger, tidemark's own tables (idempotent; --dry-run prints the SQL)."`
	Capture     captureCmd     `cmd:"" help:"Stream committed catalog changes from Postgres logical replication to Kafka."`
	Apply       applyCmd       `cmd:"" help:"Consume the topic and apply invalidations and the freshness watermark to the Redis cache tier."`
	Replay      replayCmd      `cmd:"" help:"Re-apply the topic from a point in time to the cache tier (outside the consumer group)."`
	Serve       serveCmd       `cmd:"" help:"Serve the reference catalog API on top of the cache tier."`
	Apikey      apikeyCmd      `cmd:"" name:"apikey" help:"Manage API keys."`
	Status      statusCmd      `cmd:"" help:"Freshness gate: per-partition lag and watermark age; exit 0 OK, 1 AT RISK/BREACHED, 2 unreadable."`
	Warm        warmCmd        `cmd:"" help:"Ask the elected warmer of the serve processes to fill the hottest keys now."`
	Rollout     rolloutCmd     `cmd:"" help:"Per-tenant serving mode (source, shadow, cache with a ramp): set it at run time or show it with the shadow comparison's figures."`
	Inspect     inspectCmd     `cmd:"" help:"Staleness inspector: sample cached keys and compare them with Postgres."`
}

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// app is tidemark as cli.Main runs it, with r as its root.
func app(r *root) cli.App {
	return cli.App{Name: "tidemark", Root: r, Globals: &r.Globals,
		Description: "tidemark keeps a multi-tenant catalog cache fresh: Postgres changes -> Kafka -> Redis invalidations, gated by a freshness watermark."}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var r root
	return cli.Main(ctx, app(&r), args, stdout, stderr)
}
