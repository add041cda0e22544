package api

import (
	"strings"
	"testing"
	"time"
)

// The below-min memo delays a writer's read of a write made through another
// process: it has an upper bound.
func TestMinVersionMemoIsBounded(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MinVersionMemo = MaxMinVersionMemo
	if err := cfg.Validate(); err != nil {
		t.Fatalf("memo %s refused: %v", cfg.MinVersionMemo, err)
	}
	cfg.MinVersionMemo = 10 * time.Minute
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "MinVersionMemo:") {
		t.Fatalf("memo %s: Validate = %v, want a MinVersionMemo problem", cfg.MinVersionMemo, err)
	}
}
