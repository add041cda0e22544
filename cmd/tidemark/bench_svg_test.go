package main

import (
	"reflect"
	"testing"
)

// Every benchmark that has a chart (lab/bench/<name>.Chart) offers
// --svg to write it, as BENCHMARKS.md says: a config refactor once dropped
// bench warm's.
func TestChartingBenchesHaveSVGFlag(t *testing.T) {
	for name, cmd := range map[string]any{
		"bench capture": &benchCaptureCmd{}, "bench cache": &benchCacheCmd{}, "bench apply": &benchApplyCmd{},
		"bench serve": &benchServeCmd{}, "bench e2e": &benchE2ECmd{}, "bench warm": &benchWarmCmd{},
		"bench hotkey": &benchHotkeyCmd{},
	} {
		typ := reflect.TypeOf(cmd).Elem()
		found := false
		for i := range typ.NumField() {
			if typ.Field(i).Tag.Get("name") == "svg" {
				found = true
			}
		}
		if !found {
			t.Errorf("tidemark %s has no --svg flag", name)
		}
	}
}
