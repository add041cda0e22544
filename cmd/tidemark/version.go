package main

import (
	"fmt"
	"runtime"

	"github.com/tidemark/tidemark/cmd/internal/cli"
	"github.com/tidemark/tidemark/internal/telemetry"
)

type versionCmd struct{}

// Run prints the module version and commit (internal/telemetry's BuildInfo
// says where they come from and how a build overrides them).
func (versionCmd) Run(e *cli.Env) error { //nolint:unparam // kong calls Run(...) error on every command
	b := telemetry.BuildInfo()
	rev := b.Revision
	if b.Modified {
		rev += "-dirty"
	}
	fmt.Fprintf(e.Stdout, "tidemark %s (commit %s, %s %s/%s)\n", b.Version, rev, b.GoVersion, runtime.GOOS, runtime.GOARCH)
	return nil
}
