package e2ebench

import (
	"strings"
	"testing"
)

// An extra flag may tune a stage but not move what the bench watches: a
// capture on another topic or slot, or an applier in another group, would
// leave the bench waiting on the one it gave.
func TestConfigRefusesExtraArgsTheBenchOwns(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Binary, cfg.LabBinary = "tidemark", "tidemark-lab"
	cfg.CaptureArgs, cfg.ApplyArgs = []string{"--linger=0s"}, []string{"--metrics-addr=127.0.0.1:0"}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("tuning flags refused: %v", err)
	}
	cfg.CaptureArgs, cfg.ApplyArgs = []string{"--linger=0s", "--topic=other"}, []string{"--group", "other"}
	err := cfg.Validate()
	if err == nil {
		t.Fatal("--topic for capture and --group for apply accepted")
	}
	for _, want := range []string{"CaptureArgs", "--topic", "ApplyArgs", "--group"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}
