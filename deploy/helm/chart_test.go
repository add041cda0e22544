// Package helm holds the test of the Helm chart in ./tidemark.
package helm

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidemark/tidemark/lab/localserver"
	"github.com/tidemark/tidemark/lab/testenv"

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
		for kind, want := range map[string]int{"Deployment": 3, "PodDisruptionBudget": 3, "Service": 4, "ServiceMonitor": 1, "PrometheusRule": 1, "ConfigMap": 2} {
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
			out := r.effectiveConfig(t, role)
			if want := "shutdown-timeout: 30s # file"; role == "capture" && !strings.Contains(out, want) {
				t.Errorf("capture's config lacks %q:\n%s", want, out)
			}
			if want := "shutdown-delay: 5s # file"; !strings.Contains(out, want) {
				t.Errorf("%s's config lacks %q:\n%s", role, want, out)
			}
			if g := pod.TerminationGracePeriodSeconds; g == nil || *g <= int64(delay+flush) {
				t.Errorf("%s terminationGracePeriodSeconds %v, want more than the delay %ds + flush %ds", role, g, delay, flush)
			}
			if want := "pg: postgres://tm:xxxxx@db:5432/catalog # env TIDEMARK_PG_FILE"; !strings.Contains(out, want) {
				t.Errorf("%s's DSN does not come from the Secret's file: want %q in\n%s", role, want, out)
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
		if !strings.Contains(r.configMap(t, "-dashboard").Data["tidemark.json"], `"${datasource}"`) {
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
		for _, k := range []string{"ServiceMonitor", "PrometheusRule", "PodDisruptionBudget"} {
			if r.kinds[k] != 0 {
				t.Errorf("%d %s rendered while disabled", r.kinds[k], k)
			}
		}
		if r.kinds["ConfigMap"] != 1 {
			t.Errorf("%d ConfigMaps, want only the config files' with the dashboard off", r.kinds["ConfigMap"])
		}
		c := r.deployments["apply"].Spec.Template.Spec.Containers[0]
		out := r.effectiveConfig(t, "apply")
		for _, want := range []string{"kafka-sasl-password-file: /etc/tidemark/kafka-sasl/password # file", "kafka-sasl-mechanism: SCRAM-SHA-512 # file",
			"kafka-ca-file: /etc/tidemark/kafka-ca/ca.crt # file", "kafka-tls: true # file"} {
			if !strings.Contains(out, want) {
				t.Errorf("apply's config lacks %q:\n%s", want, out)
			}
		}
		mounted := map[string]bool{}
		for _, m := range c.VolumeMounts {
			mounted[m.MountPath] = m.ReadOnly
		}
		if !mounted["/etc/tidemark/kafka-sasl"] || !mounted["/etc/tidemark/kafka-ca"] {
			t.Errorf("secret files not mounted read-only: %v", c.VolumeMounts)
		}
	})
	t.Run("role config keys", func(t *testing.T) {
		r := render(t, "serve.config.request-timeout=2s", "apply.config.max-batch=500", "capture.config.heartbeat=500ms",
			"tracing.endpoint=http://otel-collector:4318", "tracing.sampleRatio=0.25")
		for role, want := range map[string]string{"serve": "request-timeout: 2s # file", "apply": "max-batch: 500 # file", "capture": "heartbeat: 500ms # file"} {
			out := r.effectiveConfig(t, role)
			if !strings.Contains(out, want) {
				t.Errorf("%s's config lacks %q:\n%s", role, want, out)
			}
			for _, want := range []string{"trace-endpoint: http://otel-collector:4318 # file", "trace-sample-ratio: 0.25 # file"} {
				if !strings.Contains(out, want) {
					t.Errorf("%s's config lacks %q:\n%s", role, want, out)
				}
			}
		}
	})
}

// noSecretsInArgv checks that no container passes a secret in argv or in
// a variable's value: the DSNs come from the connection Secret's files, the
// other settings from the role's config file, both mounted read-only.
func (r rendered) noSecretsInArgv(t *testing.T) {
	t.Helper()
	for role, d := range r.deployments {
		pod := d.Spec.Template.Spec
		c := pod.Containers[0]
		for _, a := range c.Args {
			for _, bad := range []string{"--pg", "--redis", "postgres://", "redis://", "rediss://", "password", "secret"} {
				if strings.Contains(strings.ToLower(a), bad) {
					t.Errorf("%s argv %q holds %q: secrets and connection strings belong in the Secret's files", role, a, bad)
				}
			}
		}
		if v, ok := arg(c, "--config="); !ok || v != "/etc/tidemark/config/"+role+".yaml" {
			t.Errorf("%s args %v, want --config=/etc/tidemark/config/%s.yaml", role, c.Args, role)
		}
		for _, e := range c.Env {
			if e.ValueFrom != nil {
				t.Errorf("%s: variable %s from %+v: secrets are mounted as files, not variables", role, e.Name, e.ValueFrom)
			}
			if strings.Contains(e.Value, "://") {
				t.Errorf("%s: variable %s=%q holds a connection string", role, e.Name, e.Value)
			}
		}
		vols := map[string]corev1.Volume{}
		for _, v := range pod.Volumes {
			vols[v.Name] = v
		}
		mounts := map[string]corev1.Volume{}
		for _, m := range c.VolumeMounts {
			if !m.ReadOnly && m.MountPath != "/tmp" {
				t.Errorf("%s mounts %s writable", role, m.MountPath)
			}
			mounts[m.MountPath] = vols[m.Name]
		}
		if v := mounts["/etc/tidemark/connection"]; v.Secret == nil || v.Secret.SecretName != "tidemark-connection" {
			t.Errorf("%s: /etc/tidemark/connection is %+v, want the Secret tidemark-connection", role, v)
		}
		if v := mounts["/etc/tidemark/config"]; v.ConfigMap == nil || v.ConfigMap.Name != "rel-tidemark-config" {
			t.Errorf("%s: /etc/tidemark/config is %+v, want the ConfigMap rel-tidemark-config", role, v)
		}
		for name, want := range map[string]string{"TIDEMARK_PG_FILE": "/etc/tidemark/connection/pg", "TIDEMARK_REDIS_FILE": "/etc/tidemark/connection/redis"} {
			if e, ok := env(c, name); !ok || e.Value != want {
				t.Errorf("%s %s %+v, want %s", role, name, e, want)
			}
		}
		if d.Spec.Template.Annotations["checksum/config"] == "" {
			t.Errorf("%s: no checksum/config annotation: a changed config would not roll the pods", role)
		}
	}
}

// effectiveConfig runs the real binary on role's rendered config file, with
// the connection Secret's files where the pod has them: `tidemark <role>
// --config F --print-config` must accept every key and says where each
// value came from.
func (r rendered) effectiveConfig(t *testing.T, role string) string {
	t.Helper()
	r.noSecretsInArgv(t)
	body := r.configMap(t, "-config").Data[role+".yaml"]
	if body == "" {
		t.Fatalf("no config file for %s in the rendered ConfigMap", role)
	}
	// The pod's /etc/tidemark is dir here: the config file names the
	// mounted Secrets' files, which must exist to be accepted.
	dir := t.TempDir()
	certs, err := localserver.MakeCerts(filepath.Join(dir, "certs"))
	if err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(certs.CA)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{"config/" + role + ".yaml": strings.ReplaceAll(body, "/etc/tidemark/", dir+"/"),
		"connection/pg": "postgres://tm:pgsecret@db:5432/catalog\n", "connection/redis": "redis://:rsecret@cache:6379/0\n",
		"kafka-sasl/password": "ksecret\n", "kafka-ca/ca.crt": string(ca)}
	for name, b := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c := r.deployments[role].Spec.Template.Spec.Containers[0]
	args := []string{role, "--config", filepath.Join(dir, "config", role+".yaml"), "--print-config"}
	args = append(args, c.Args[2:]...) // the role's extra args, after --config
	cmd := exec.Command(testenv.Binary(t), args...)
	cmd.Env = os.Environ()
	for _, e := range c.Env { // the pod's variables, with its paths under dir
		cmd.Env = append(cmd.Env, e.Name+"="+strings.ReplaceAll(e.Value, "/etc/tidemark/", dir+"/"))
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tidemark %s refuses its rendered config file: %v\n%s\n--- config ---\n%s", role, err, stderr.String(), body)
	}
	for _, secret := range []string{"pgsecret", "rsecret", "ksecret"} {
		if strings.Contains(string(out), secret) {
			t.Errorf("--print-config of %s shows %q", role, secret)
		}
	}
	return strings.ReplaceAll(string(out), dir+"/", "/etc/tidemark/")
}

// configMap is the rendered ConfigMap whose name ends in suffix.
func (r rendered) configMap(t *testing.T, suffix string) *corev1.ConfigMap {
	t.Helper()
	for _, cm := range r.configMaps {
		if strings.HasSuffix(cm.Name, suffix) {
			return cm
		}
	}
	t.Fatalf("no ConfigMap named *%s", suffix)
	return nil
}

// TestChartFilesMatchSources: the chart's copies of the alert rules and the
// dashboard are the files compose/ uses (helm cannot read outside the
// chart; `make helm-sync` copies them).
func TestChartFilesMatchSources(t *testing.T) {
	for copy, src := range map[string]string{
		"github.com/tidemark/tidemark/files/alerts.yml":    "../../compose/prometheus/alerts.yml",
		"github.com/tidemark/tidemark/files/tidemark.json": "../../compose/grafana/dashboards/tidemark.json",
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
