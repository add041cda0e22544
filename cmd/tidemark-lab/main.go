// Command tidemark-lab is the lab beside the product binary: the local
// pipeline (dev), an embedded Kafka broker, the benchmarks and the chaos
// harness. Harnesses that run the stages as processes run the product
// binary, tidemark, found beside this one (tidemarkBinary).
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/tidemark/tidemark/cmd/internal/cli"
)

// root is tidemark-lab's command line.
type root struct {
	cli.Globals

	Dev   devCmd   `cmd:"" help:"Run the whole pipeline locally in one process with embedded defaults."`
	Kafka kafkaCmd `cmd:"" help:"Run an embedded Kafka broker (kfake), or with --real an Apache Kafka cluster, for local runs and manual testing. Production uses its own Kafka."`
	Bench benchCmd `cmd:"" help:"Benchmarks against ceilings measured in the same run."`
	Chaos chaosCmd `cmd:"" help:"Run the pipeline under injected faults and check every answer against the source history; exit 0 only with zero violations."`
	Proxy proxyCmd `cmd:"" help:"Forward TCP connections to one server, with an HTTP endpoint that cuts and restores them (the chaos harness's serve-redis-cut fault runs one per serve process)."`
}

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// app is tidemark-lab as cli.Main runs it, with r as its root.
func app(r *root) cli.App {
	return cli.App{Name: "tidemark-lab", Root: r, Globals: &r.Globals,
		Description: "tidemark's lab: the local pipeline, an embedded broker, benchmarks and the chaos harness, running the product binary tidemark."}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var r root
	return cli.Main(ctx, app(&r), args, stdout, stderr)
}

// tidemarkBinary is the product binary the harnesses run as processes:
// tidemark beside this executable, else tidemark on PATH.
func tidemarkBinary() (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("finding the tidemark binary: %w", err)
	}
	beside := filepath.Join(filepath.Dir(self), "tidemark")
	if _, err := os.Stat(beside); err == nil {
		return beside, nil
	}
	p, err := exec.LookPath("tidemark")
	if err != nil {
		return "", fmt.Errorf("the product binary tidemark is neither beside %s nor on PATH (make build builds both into bin/): %w", self, err)
	}
	return p, nil
}
