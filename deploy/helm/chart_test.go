// Package helm holds the test of the Helm chart in ./tidemark.
package helm

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

// helmVersion is the helm the Makefile installs (make helm).
const helmVersion = "v3.22.0"

// helmBinary is $TIDEMARK_HELM, else the one `make helm` installs.
func helmBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("TIDEMARK_HELM"); p != "" {
		return p
	}
	home, _ := os.UserHomeDir()
	p := filepath.Join(home, ".cache", "tidemark-tools", "helm-"+helmVersion, "helm")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("helm %s not installed at %s: run `make helm` (or set TIDEMARK_HELM): %v", helmVersion, p, err)
	}
	return p
}

// serviceMonitor and prometheusRule are the parts of the prometheus-operator
// CRDs the chart uses; decoding is strict, so a misspelt field fails.
type serviceMonitor struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Metadata   map[string]any `json:"metadata"`
	Spec       struct {
		JobLabel string `json:"jobLabel"`
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		Endpoints []struct {
			Port     string `json:"port"`
			Interval string `json:"interval"`
		} `json:"endpoints"`
	} `json:"spec"`
}

type prometheusRule struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Metadata   map[string]any `json:"metadata"`
	Spec       struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert       string            `json:"alert"`
				Record      string            `json:"record"`
				Expr        string            `json:"expr"`
				For         string            `json:"for"`
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

// rendered is one `helm template` output, decoded.
type rendered struct {
	kinds       map[string]int
	deployments map[string]*appsv1.Deployment // by component
	services    []*corev1.Service
	pdbs        []*policyv1.PodDisruptionBudget
	hpas        []*autoscalingv2.HorizontalPodAutoscaler
	configMaps  []*corev1.ConfigMap
	monitors    []*serviceMonitor
	rules       []*prometheusRule
}

func strict(t *testing.T, doc []byte, into any) {
	t.Helper()
	if err := yaml.UnmarshalStrict(doc, into); err != nil {
		t.Fatalf("decoding %T strictly: %v\n%s", into, err, doc)
	}
}

func render(t *testing.T, set ...string) rendered {
	t.Helper()
	args := []string{"template", "rel", "tidemark", "--namespace", "tm"}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	cmd := exec.Command(helmBinary(t), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %v: %v\n%s", args, err, stderr.String())
	}
	r := rendered{kinds: map[string]int{}, deployments: map[string]*appsv1.Deployment{}}
	for _, doc := range strings.Split(string(out), "\n---") {
		var head struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatalf("not YAML: %v\n%s", err, doc)
		}
		if head.Kind == "" {
			continue // a comment-only document
		}
		r.kinds[head.Kind]++
		b := []byte(doc)
		switch head.Kind {
		case "Deployment":
			var d appsv1.Deployment
			strict(t, b, &d)
			r.deployments[d.Labels["app.kubernetes.io/component"]] = &d
		case "Service":
			var s corev1.Service
			strict(t, b, &s)
			r.services = append(r.services, &s)
		case "PodDisruptionBudget":
			var p policyv1.PodDisruptionBudget
			strict(t, b, &p)
			r.pdbs = append(r.pdbs, &p)
		case "HorizontalPodAutoscaler":
			var h autoscalingv2.HorizontalPodAutoscaler
			strict(t, b, &h)
			r.hpas = append(r.hpas, &h)
		case "ConfigMap":
			var c corev1.ConfigMap
			strict(t, b, &c)
			r.configMaps = append(r.configMaps, &c)
		case "ServiceMonitor":
			var m serviceMonitor
			strict(t, b, &m)
			r.monitors = append(r.monitors, &m)
		case "PrometheusRule":
			var p prometheusRule
			strict(t, b, &p)
			r.rules = append(r.rules, &p)
		default:
			t.Fatalf("the chart renders a %s the test does not decode", head.Kind)
		}
	}
	return r
}

func arg(c corev1.Container, prefix string) (string, bool) {
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, prefix); ok {
			return v, true
		}
	}
	return "", false
}

func env(c corev1.Container, name string) (corev1.EnvVar, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e, true
		}
	}
	return corev1.EnvVar{}, false
}

// TestChartRendersValidObjects renders the chart for a few value sets and
// decodes every object strictly into the Kubernetes API types (an unknown or
// misplaced field fails), then checks the rules the chart promises.
func TestChartRendersValidObjects(t *testing.T) {
	t.Run("defaults", func(t *testing.T) {
		r := render(t)
		t.Logf("kinds: %v", r.kinds)
		for kind, want := range map[string]int{"Deployment": 3, "PodDisruptionBudget": 3, "Service": 4, "ServiceMonitor": 1, "PrometheusRule": 1, "ConfigMap": 1} {
			if r.kinds[kind] != want {
				t.Errorf("%d %s, want %d (all: %v)", r.kinds[kind], kind, want, r.kinds)
			}
		}
		if c := r.deployments["capture"]; c == nil || c.Spec.Replicas == nil || *c.Spec.Replicas != 2 {
			t.Fatalf("capture Deployment: want 2 replicas (one active, one standing by)")
		}
		if s := r.deployments["capture"].Spec.Strategy; s.RollingUpdate == nil || s.RollingUpdate.MaxUnavailable.IntValue() != 0 {
			t.Errorf("capture rolls out with maxUnavailable %v, want 0 (a standby stays ready)", s.RollingUpdate)
		}
		for role, d := range r.deployments {
			pod := d.Spec.Template.Spec
			c := pod.Containers[0]
			if len(c.Args) == 0 || c.Args[0] != role {
				t.Errorf("%s runs %v", role, c.Args)
			}
			sc, psc := c.SecurityContext, pod.SecurityContext
			if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
				sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
				t.Errorf("%s: not non-root with a read-only root filesystem: pod %+v container %+v", role, psc, sc)
			}
			for name, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
				want := map[string]string{"liveness": "/healthz", "readiness": "/readyz"}[name]
				if p == nil || p.Exec == nil || len(p.Exec.Command) < 4 || p.Exec.Command[1] != "healthcheck" || !strings.HasSuffix(p.Exec.Command[3], want) {
					t.Errorf("%s %s probe %+v, want an exec of tidemark healthcheck on %s", role, name, p, want)
				}
			}
			// The grace period covers the shutdown delay and the role's flush.
			delay := 5
			flush := map[string]int{"capture": 30, "apply": 10, "serve": 10}[role]
			if v, ok := arg(c, "--shutdown-timeout="); role == "capture" && (!ok || v != "30s") {
				t.Errorf("capture --shutdown-timeout %q, want 30s", v)
			}
			if e, ok := env(c, "TIDEMARK_SHUTDOWN_DELAY"); !ok || e.Value != "5s" {
				t.Errorf("%s TIDEMARK_SHUTDOWN_DELAY %+v, want 5s", role, e)
			}
			if g := pod.TerminationGracePeriodSeconds; g == nil || *g <= int64(delay+flush) {
				t.Errorf("%s terminationGracePeriodSeconds %v, want more than the delay %ds + flush %ds", role, g, delay, flush)
			}
			if e, ok := env(c, "TIDEMARK_PG"); !ok || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
				t.Errorf("%s: TIDEMARK_PG not from a Secret: %+v", role, e)
			}
		}
		rules := r.rules[0]
		n := 0
		for _, g := range rules.Spec.Groups {
			for _, rule := range g.Rules {
				n++
				if u := rule.Annotations["runbook_url"]; !strings.HasPrefix(u, "https://github.com/tidemark/tidemark/blob/main/docs/operations.md#") {
					t.Errorf("alert %s runbook_url %q, want the base URL + docs/operations.md#...", rule.Alert, u)
				}
			}
		}
		if want := strings.Count(mustRead(t, "../../compose/prometheus/alerts.yml"), "- alert: "); n != want {
			t.Errorf("PrometheusRule has %d alerts, want the %d of compose/prometheus/alerts.yml", n, want)
		}
		if !strings.Contains(r.configMaps[0].Data["tidemark.json"], `"${datasource}"`) {
			t.Error("dashboard ConfigMap lacks the templated data source")
		}
		if r.monitors[0].Spec.JobLabel != "tidemark.io/job" {
			t.Errorf("ServiceMonitor jobLabel %q", r.monitors[0].Spec.JobLabel)
		}
		jobs := map[string]bool{}
		for _, s := range r.services {
			if j := s.Labels["tidemark.io/job"]; j != "" {
				jobs[j] = true
			}
		}
		for _, j := range []string{"tidemark-capture", "tidemark-apply", "tidemark-serve"} {
			if !jobs[j] {
				t.Errorf("no metrics Service labelled job %s (the alerts' up{job=...})", j)
			}
		}
	})
	t.Run("apply capped at partitions, serve autoscaled", func(t *testing.T) {
		r := render(t, "apply.replicas=50", "connection.partitions=6", "serve.autoscaling.enabled=true")
		if got := *r.deployments["apply"].Spec.Replicas; got != 6 {
			t.Errorf("apply replicas %d, want 6 (the partition count)", got)
		}
		if r.deployments["serve"].Spec.Replicas != nil {
			t.Errorf("serve has fixed replicas %d with the HPA on", *r.deployments["serve"].Spec.Replicas)
		}
		if len(r.hpas) != 1 || r.hpas[0].Spec.ScaleTargetRef.Name != r.deployments["serve"].Name {
			t.Errorf("HPA %+v, want one scaling %s", r.hpas, r.deployments["serve"].Name)
		}
	})
	t.Run("monitoring off, Kafka secrets as files", func(t *testing.T) {
		r := render(t, "serviceMonitor.enabled=false", "prometheusRule.enabled=false", "dashboard.enabled=false", "podDisruptionBudget.enabled=false",
			"connection.kafkaSASL.mechanism=SCRAM-SHA-512", "connection.kafkaSASL.user=tm", "connection.kafkaSASL.passwordSecret=kafka-pw",
			"connection.kafkaCASecret=kafka-ca")
		for _, k := range []string{"ServiceMonitor", "PrometheusRule", "ConfigMap", "PodDisruptionBudget"} {
			if r.kinds[k] != 0 {
				t.Errorf("%d %s rendered while disabled", r.kinds[k], k)
			}
		}
		c := r.deployments["apply"].Spec.Template.Spec.Containers[0]
		if e, ok := env(c, "TIDEMARK_KAFKA_SASL_PASSWORD_FILE"); !ok || e.Value != "/etc/tidemark/kafka-sasl/password" {
			t.Errorf("TIDEMARK_KAFKA_SASL_PASSWORD_FILE %+v", e)
		}
		mounted := map[string]bool{}
		for _, m := range c.VolumeMounts {
			mounted[m.MountPath] = m.ReadOnly
		}
		if !mounted["/etc/tidemark/kafka-sasl"] || !mounted["/etc/tidemark/kafka-ca"] {
			t.Errorf("secret files not mounted read-only: %v", c.VolumeMounts)
		}
	})
}

// TestChartFilesMatchSources: the chart's copies of the alert rules and the
// dashboard are the files compose/ uses (helm cannot read outside the
// chart; `make helm-sync` copies them).
func TestChartFilesMatchSources(t *testing.T) {
	for copy, src := range map[string]string{
		"tidemark/files/alerts.yml":    "../../compose/prometheus/alerts.yml",
		"tidemark/files/tidemark.json": "../../compose/grafana/dashboards/tidemark.json",
	} {
		a, err := os.ReadFile(copy)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("deploy/helm/%s differs from %s: run `make helm-sync`", copy, strings.TrimPrefix(src, "../../"))
		}
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
