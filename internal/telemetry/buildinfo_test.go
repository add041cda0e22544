package telemetry

import (
	"runtime/debug"
	"testing"
)

// The module version and vcs.revision come from the build information; the
// link-time values win when set.
func TestBuildInfoReadsModuleAndCommit(t *testing.T) {
	bi := &debug.BuildInfo{Main: debug.Module{Path: "tidemark", Version: "v0.1.1-0.20261201062029-6f211d88d117"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "6f211d88d11771ebc989c3db1098183ce5c4e3a5"}, {Key: "vcs.modified", Value: "true"}}}
	got := fromBuildInfo(bi, true, "", "")
	if got.Version != "v0.1.1-0.20261201062029-6f211d88d117" || got.Revision != "6f211d88d11771ebc989c3db1098183ce5c4e3a5" || !got.Modified {
		t.Fatalf("from build info: %+v", got)
	}
	if got := fromBuildInfo(bi, true, "v1.0.0", "abc"); got.Version != "v1.0.0" || got.Revision != "abc" {
		t.Fatalf("link-time values: %+v, want v1.0.0 / abc", got)
	}
	if got := fromBuildInfo(nil, false, "", ""); got.Version != "(devel)" || got.Revision != "unknown" {
		t.Fatalf("no build info: %+v", got)
	}
}
