package main

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/tidemark/tidemark/cmd/internal/cli/clitest"
)

// Every field a command's configs can report is set by a flag, and the
// error names it.
func TestEveryValidatedFieldHasAFlag(t *testing.T) {
	clitest.EveryValidatedFieldHasAFlag(t, &root{}, []string{
		"serve trace.BatchTimeout", "capture trace.BatchTimeout", "apply trace.BatchTimeout",
		"serve audit.Batch", "serve audit.SLO", "serve audit.Window", "serve audit.LeaseTTL",
		"serve warm.Workers", "serve warm.SlowFactor", "serve warm.Collapse", "serve warm.StepEvery", "serve warm.CheckEvery", "serve warm.LeaseTTL", "serve warm.HotSetWait",
		"serve replica.AutoFactor", "serve replica.MaxReplicas", "serve replica.MaxKeys", "serve replica.Interval", "serve replica.RenewBefore",
	})
}

// A variable that two commands read means the same thing in both: the
// deployment's servers and the names its processes share. The rest are one
// flag defined once, or each command's own (TIDEMARK_CAPTURE_LINGER and
// TIDEMARK_APPLY_LINGER, not one TIDEMARK_LINGER for two settings).
func TestEveryVariableMeansOneThing(t *testing.T) {
	clitest.EveryVariableMeansOneThing(t, &root{}, []string{
		"TIDEMARK_PG", "TIDEMARK_KAFKA", "TIDEMARK_REDIS", // the deployment's servers
		"TIDEMARK_TOPIC", "TIDEMARK_GROUP", "TIDEMARK_SLOT", "TIDEMARK_PUBLICATION", // its pipeline's names
		"TIDEMARK_NAMESPACE", "TIDEMARK_SOURCE_POOL", "TIDEMARK_SLO", // its cache tier's
	})
}

// The chart's common config, which every role's file takes, refuses the
// flags two of its roles bind for settings of their own (each reading its
// own variable): the list in its template is exactly those flags.
func TestChartRefusesPerRoleKeysInCommonConfig(t *testing.T) {
	envs := map[string]map[string]bool{} // flag name -> its variables across the chart's roles
	for _, u := range clitest.FlagUses(t, &root{}) {
		if u.Command != "capture" && u.Command != "apply" && u.Command != "serve" {
			continue
		}
		if envs[u.Flag] == nil {
			envs[u.Flag] = map[string]bool{}
		}
		envs[u.Flag][strings.Join(u.Envs, ",")] = true
	}
	var want []string
	for name, vars := range envs {
		if len(vars) > 1 {
			want = append(want, name)
		}
	}
	tmpl, err := os.ReadFile("../../deploy/helm/tidemark/templates/config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`range \$key := list ((?:"[a-z-]+" ?)+)`).FindSubmatch(tmpl)
	if m == nil {
		t.Fatal("deploy/helm/tidemark/templates/config.yaml has no `range $key := list ...` of per-role keys")
	}
	var got []string
	for _, q := range strings.Fields(string(m[1])) {
		got = append(got, strings.Trim(q, `"`))
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("the chart refuses %v in its common config; the flags capture, apply and serve bind to different variables are %v", got, want)
	}
}
