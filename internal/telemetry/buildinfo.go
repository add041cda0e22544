package telemetry

import (
	"runtime"
	"runtime/debug"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// version and revision may be set at link time, for builds without module
// or VCS information (a `go build -buildvcs=false` in a container, or any
// build in a git worktree, which Go does not stamp):
//
//	go build -ldflags "-X github.com/tidemark/tidemark/internal/telemetry.version=v0.1.0 -X github.com/tidemark/tidemark/internal/telemetry.revision=$(git rev-parse HEAD)" ./cmd/tidemark
//
// Left empty, they come from the binary's build information: the module
// version (a tagged release, or the pseudo-version Go derives from the
// commit) and vcs.revision.
var (
	version  string
	revision string
)

// Build is what a binary knows about its own build.
type Build struct {
	Version   string // module version, "(devel)" when Go knows none
	Revision  string // VCS commit, "unknown" when built without VCS information
	Modified  bool   // the working tree had uncommitted changes
	GoVersion string
}

var readBuild = sync.OnceValue(func() Build {
	bi, ok := debug.ReadBuildInfo()
	return fromBuildInfo(bi, ok, version, revision)
})

// fromBuildInfo reads bi (ok false: none), then lets the link-time values
// win when set.
func fromBuildInfo(bi *debug.BuildInfo, ok bool, linkVersion, linkRevision string) Build {
	b := Build{Version: "(devel)", Revision: "unknown", GoVersion: runtime.Version()}
	if ok {
		if v := bi.Main.Version; v != "" {
			b.Version = v
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Revision = s.Value
			case "vcs.modified":
				b.Modified = s.Value == "true"
			}
		}
	}
	if linkVersion != "" {
		b.Version = linkVersion
	}
	if linkRevision != "" {
		b.Revision = linkRevision
	}
	return b
}

// BuildInfo is this binary's version, commit and Go version.
func BuildInfo() Build { return readBuild() }

// NewBuildInfoCollector is tidemark_build_info{version,revision,goversion} 1,
// the series that says which build each process runs (a rollout in progress
// shows two versions).
func NewBuildInfoCollector() prometheus.Collector {
	b := BuildInfo()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "tidemark_build_info",
		Help:        "Always 1; the labels say which build this process runs.",
		ConstLabels: prometheus.Labels{"version": b.Version, "revision": b.Revision, "goversion": b.GoVersion},
	})
	g.Set(1)
	return g
}
