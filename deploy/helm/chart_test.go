// Package helm holds the test of the Helm chart in ./tidemark.
package helm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidemark/tidemark/lab/localserver"
	"github.com/tidemark/tidemark/lab/testenv"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
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
	jobs        map[string]*batchv1.Job       // by component
	accounts    []*corev1.ServiceAccount
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

// helmTemplate runs `helm template` with values (YAML, may be empty) and
// --set flags; it returns the output or helm's error and stderr.
func helmTemplate(t *testing.T, values string, set ...string) ([]byte, error) {
	t.Helper()
	args := []string{"template", "rel", "tidemark", "--namespace", "tm"}
	if values != "" {
		f := filepath.Join(t.TempDir(), "values.yaml")
		if err := os.WriteFile(f, []byte(values), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "-f", f)
	}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	cmd := exec.Command(helmBinary(t), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("helm %v: %w\n%s", args, err, stderr.String())
	}
	return out, nil
}

func render(t *testing.T, values string, set ...string) rendered {
	t.Helper()
	out, err := helmTemplate(t, values, set...)
	if err != nil {
		t.Fatal(err)
	}
	r := rendered{kinds: map[string]int{}, deployments: map[string]*appsv1.Deployment{}, jobs: map[string]*batchv1.Job{}}
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
		case "Job":
			var j batchv1.Job
			strict(t, b, &j)
			r.jobs[j.Labels["app.kubernetes.io/component"]] = &j
		case "ServiceAccount":
			var a corev1.ServiceAccount
			strict(t, b, &a)
			r.accounts = append(r.accounts, &a)
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

// pods are the rendered pod templates by component: the three roles' and
// the migration Job's.
func (r rendered) pods() map[string]corev1.PodTemplateSpec {
	m := map[string]corev1.PodTemplateSpec{}
	for role, d := range r.deployments {
		m[role] = d.Spec.Template
	}
	for role, j := range r.jobs {
		m[role] = j.Spec.Template
	}
	return m
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
		r := render(t, "")
		t.Logf("kinds: %v", r.kinds)
		for kind, want := range map[string]int{"Deployment": 3, "PodDisruptionBudget": 3, "Service": 4, "ServiceMonitor": 1, "PrometheusRule": 1,
			"ConfigMap": 2, "Job": 1, "ServiceAccount": 1} {
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
		// Both captures on one node would lose both to one node's failure.
		tsc := r.deployments["capture"].Spec.Template.Spec.TopologySpreadConstraints
		if len(tsc) != 1 || tsc[0].TopologyKey != "kubernetes.io/hostname" || tsc[0].MaxSkew != 1 || tsc[0].WhenUnsatisfiable != corev1.DoNotSchedule ||
			tsc[0].LabelSelector == nil || tsc[0].LabelSelector.MatchLabels["app.kubernetes.io/component"] != "capture" {
			t.Errorf("capture's topologySpreadConstraints %+v, want maxSkew 1 on the hostname, DoNotSchedule, over capture's pods", tsc)
		}
		wantPG := map[string]string{"capture": "/etc/tidemark/connection/pg-capture", "serve": "/etc/tidemark/connection/pg-serve", "apply": ""}
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
			for name, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe, "startup": c.StartupProbe} {
				want := map[string]string{"liveness": "/healthz", "readiness": "/readyz", "startup": "/healthz"}[name]
				if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != want || p.HTTPGet.Port.String() != "metrics" || p.Exec != nil {
					t.Errorf("%s %s probe %+v, want an httpGet of %s on the metrics port", role, name, p, want)
				}
			}
			if a := pod.Affinity; a == nil || a.PodAntiAffinity == nil || len(a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 ||
				a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm.TopologyKey != "kubernetes.io/hostname" {
				t.Errorf("%s: affinity %+v, want a preferred anti-affinity on the hostname", role, a)
			}
			if pod.ServiceAccountName != "rel-tidemark" || pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
				t.Errorf("%s: serviceAccountName %q automount %v, want rel-tidemark without its token", role, pod.ServiceAccountName, pod.AutomountServiceAccountToken)
			}
			// Each role has its own Postgres role: its pod sees only its DSN.
			e, ok := env(c, "TIDEMARK_PG_FILE")
			if e.Value != wantPG[role] || ok != (wantPG[role] != "") {
				t.Errorf("%s TIDEMARK_PG_FILE %q (set %v), want %q", role, e.Value, ok, wantPG[role])
			}
			keys := secretKeys(pod, "tidemark-connection")
			want := []string{"redis"}
			if wantPG[role] != "" {
				want = []string{filepath.Base(wantPG[role]), "redis"}
			}
			if strings.Join(keys, ",") != strings.Join(want, ",") {
				t.Errorf("%s mounts the connection Secret's keys %v, want only %v", role, keys, want)
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
			if strings.Contains(out, "kafka-tls: true") {
				t.Errorf("%s: Kafka TLS on without SASL or a CA:\n%s", role, out)
			}
			if g := pod.TerminationGracePeriodSeconds; g == nil || *g <= int64(delay+flush) {
				t.Errorf("%s terminationGracePeriodSeconds %v, want more than the delay %ds + flush %ds", role, g, delay, flush)
			}
			if want := "pg: postgres://tm:xxxxx@db:5432/catalog # env TIDEMARK_PG_FILE"; wantPG[role] != "" && !strings.Contains(out, want) {
				t.Errorf("%s's DSN does not come from the Secret's file: want %q in\n%s", role, want, out)
			}
		}
		// The migration Job: a pre-install/pre-upgrade hook running migrate
		// as the migration role, with nothing but that DSN mounted.
		j := r.jobs["migrate"]
		if j == nil {
			t.Fatal("no migration Job")
		}
		if h := j.Annotations["helm.sh/hook"]; h != "pre-install,pre-upgrade" {
			t.Errorf("migration Job hook %q, want pre-install,pre-upgrade", h)
		}
		jc := j.Spec.Template.Spec.Containers[0]
		if len(jc.Args) == 0 || jc.Args[0] != "migrate" {
			t.Errorf("migration Job runs %v", jc.Args)
		}
		if e, _ := env(jc, "TIDEMARK_PG_FILE"); e.Value != "/etc/tidemark/connection/pg-migrate" {
			t.Errorf("migration Job TIDEMARK_PG_FILE %q, want the migration role's file", e.Value)
		}
		if keys := secretKeys(j.Spec.Template.Spec, "tidemark-connection"); strings.Join(keys, ",") != "pg-migrate" {
			t.Errorf("migration Job mounts the connection Secret's keys %v, want only pg-migrate", keys)
		}
		if j.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyNever {
			t.Errorf("migration Job restartPolicy %q", j.Spec.Template.Spec.RestartPolicy)
		}
		rules := r.rules[0]
		n := 0
		absent := map[string]bool{}
		for _, g := range rules.Spec.Groups {
			for _, rule := range g.Rules {
				n++
				if u := rule.Annotations["runbook_url"]; !strings.HasPrefix(u, "https://github.com/tidemark/tidemark/blob/main/docs/operations.md#") {
					t.Errorf("alert %s runbook_url %q, want the base URL + docs/operations.md#...", rule.Alert, u)
				}
				// Another release's scrapes must not hide this one's absence.
				if strings.Contains(rule.Expr, "job=") && !strings.Contains(rule.Expr, `namespace="tm",job=`) {
					t.Errorf("alert %s: %q is not scoped to the release's namespace", rule.Alert, rule.Expr)
				}
				if strings.HasPrefix(rule.Expr, "absent(") {
					absent[rule.Alert] = true
				}
			}
		}
		for _, a := range []string{"TidemarkCaptureAbsent", "TidemarkApplierAbsent", "TidemarkServeAbsent", "TidemarkWatermarkAbsent"} {
			if !absent[a] {
				t.Errorf("PrometheusRule lacks the absent() alert %s", a)
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
	t.Run("MSK IAM with IRSA", func(t *testing.T) {
		r := render(t, `
serviceAccount:
  annotations:
    eks.amazonaws.com/role-arn: arn:aws:iam::123456789012:role/tidemark
connection:
  kafka: b-1.tm.abc123.c2.kafka.eu-west-1.amazonaws.com:9098,b-2.tm.abc123.c2.kafka.eu-west-1.amazonaws.com:9098
  kafkaSASL:
    mechanism: AWS_MSK_IAM
capture:
  serviceAccountName: tidemark-capture
`)
		if len(r.accounts) != 1 || r.accounts[0].Annotations["eks.amazonaws.com/role-arn"] != "arn:aws:iam::123456789012:role/tidemark" {
			t.Fatalf("ServiceAccount %+v, want one with the IRSA role annotation", r.accounts)
		}
		for role, d := range r.deployments {
			// capture's own ServiceAccount (its own IAM role), the others the chart's.
			want := r.accounts[0].Name
			if role == "capture" {
				want = "tidemark-capture"
			}
			if sa := d.Spec.Template.Spec.ServiceAccountName; sa != want {
				t.Errorf("%s runs as ServiceAccount %q, want %q (IRSA's credentials)", role, sa, want)
			}
			out := r.effectiveConfig(t, role)
			for _, want := range []string{"kafka-sasl-mechanism: AWS_MSK_IAM # file", "kafka-tls: true # file"} {
				if !strings.Contains(out, want) {
					t.Errorf("%s's config lacks %q:\n%s", role, want, out)
				}
			}
		}
	})
	t.Run("Confluent Cloud PLAIN", func(t *testing.T) {
		r := render(t, `
connection:
  kafka: pkc-abc12.eu-west-1.aws.confluent.cloud:9092
  kafkaSASL:
    mechanism: PLAIN
    user: ABCDEFGHIJKLMNOP
    passwordSecret: confluent-api-secret
`)
		for role := range r.deployments {
			out := r.effectiveConfig(t, role)
			for _, want := range []string{"kafka-sasl-mechanism: PLAIN # file", "kafka-tls: true # file",
				"kafka-sasl-password-file: /etc/tidemark/kafka-sasl/password # file"} {
				if !strings.Contains(out, want) {
					t.Errorf("%s's config lacks %q:\n%s", role, want, out)
				}
			}
		}
	})
	t.Run("Vault agent annotations", func(t *testing.T) {
		r := render(t, `
podAnnotations:
  vault.hashicorp.com/agent-inject: "true"
  vault.hashicorp.com/role: tidemark
  vault.hashicorp.com/agent-inject-secret-pg-capture: database/creds/tidemark-capture
  vault.hashicorp.com/agent-inject-secret-pg-serve: database/creds/tidemark-serve
  vault.hashicorp.com/agent-inject-secret-pg-migrate: database/creds/tidemark-migrate
  vault.hashicorp.com/agent-inject-secret-redis: secret/data/tidemark/redis
podLabels:
  team: catalog
migrate:
  podAnnotations:
    vault.hashicorp.com/agent-pre-populate-only: "true"
connection:
  existingSecret: ""
  dir: /vault/secrets
`)
		for role, p := range r.pods() {
			if p.Annotations["vault.hashicorp.com/agent-inject"] != "true" || p.Annotations["vault.hashicorp.com/role"] != "tidemark" {
				t.Errorf("%s pod annotations %v lack the Vault agent's", role, p.Annotations)
			}
			if p.Labels["team"] != "catalog" {
				t.Errorf("%s pod labels %v lack podLabels", role, p.Labels)
			}
			// An agent sidecar in a Job would keep it running forever.
			if pre := p.Annotations["vault.hashicorp.com/agent-pre-populate-only"]; (role == "migrate") != (pre == "true") {
				t.Errorf("%s: agent-pre-populate-only %q, want it on the migration Job only", role, pre)
			}
			for _, v := range p.Spec.Volumes {
				if v.Secret != nil && v.Name == "connection" {
					t.Errorf("%s mounts a connection Secret %q with existingSecret empty", role, v.Secret.SecretName)
				}
			}
		}
		for role := range r.deployments {
			out := r.effectiveConfig(t, role)
			if want := "# env TIDEMARK_REDIS_FILE"; !strings.Contains(out, want) {
				t.Errorf("%s's Redis URL does not come from the agent's file:\n%s", role, out)
			}
		}
		if e, _ := env(r.jobs["migrate"].Spec.Template.Spec.Containers[0], "TIDEMARK_PG_FILE"); e.Value != "/vault/secrets/pg-migrate" {
			t.Errorf("migration Job reads its DSN from %q, want /vault/secrets/pg-migrate", e.Value)
		}
	})
	t.Run("ElastiCache TLS with a CA volume", func(t *testing.T) {
		r := render(t, `
config:
  redis-ca-file: /etc/tidemark/redis-ca/ca.pem
  redis-user: tidemark
  redis-mode: cluster
extraVolumes:
  - name: elasticache-ca
    configMap:
      name: elasticache-ca
extraVolumeMounts:
  - name: elasticache-ca
    mountPath: /etc/tidemark/redis-ca
    readOnly: true
initContainers:
  - name: wait-for-dns
    image: busybox:1.36
    args: ["nslookup", "clustercfg.tidemark.abc123.euw1.cache.amazonaws.com"]
priorityClassName: tidemark-critical
envFrom:
  - configMapRef:
      name: tidemark-extra
env:
  GOMEMLIMIT: 400MiB
  POD_NAME:
    valueFrom:
      fieldRef:
        fieldPath: metadata.name
serve:
  topologySpreadConstraints:
    - maxSkew: 1
      topologyKey: topology.kubernetes.io/zone
      whenUnsatisfiable: ScheduleAnyway
`)
		for role, p := range r.pods() {
			s := p.Spec
			if s.PriorityClassName != "tidemark-critical" || len(s.InitContainers) != 1 || s.InitContainers[0].Name != "wait-for-dns" {
				t.Errorf("%s: priorityClassName %q, init containers %+v", role, s.PriorityClassName, s.InitContainers)
			}
			c := s.Containers[0]
			if e, _ := env(c, "POD_NAME"); e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.name" {
				t.Errorf("%s: POD_NAME %+v, want valueFrom the pod's name", role, e)
			}
			if e, _ := env(c, "GOMEMLIMIT"); e.Value != "400MiB" {
				t.Errorf("%s: GOMEMLIMIT %+v", role, e)
			}
			if len(c.EnvFrom) != 1 || c.EnvFrom[0].ConfigMapRef == nil || c.EnvFrom[0].ConfigMapRef.Name != "tidemark-extra" {
				t.Errorf("%s: envFrom %+v", role, c.EnvFrom)
			}
		}
		tsc := r.deployments["serve"].Spec.Template.Spec.TopologySpreadConstraints
		if len(tsc) != 1 || tsc[0].TopologyKey != "topology.kubernetes.io/zone" || tsc[0].LabelSelector == nil ||
			tsc[0].LabelSelector.MatchLabels["app.kubernetes.io/component"] != "serve" {
			t.Errorf("serve's topologySpreadConstraints %+v, want the zone spread with serve's selector filled in", tsc)
		}
		for role := range r.deployments {
			out := r.effectiveConfig(t, role, "rediss://tidemark:rsecret@clustercfg.tidemark.abc123.euw1.cache.amazonaws.com:6379\n")
			for _, want := range []string{"redis-ca-file: /etc/tidemark/redis-ca/ca.pem # file", "redis-mode: cluster # file", "redis-user: tidemark # file"} {
				if !strings.Contains(out, want) {
					t.Errorf("%s's config lacks %q:\n%s", role, want, out)
				}
			}
		}
	})
	t.Run("apply capped at partitions, serve autoscaled", func(t *testing.T) {
		r := render(t, "", "apply.replicas=50", "connection.partitions=6", "serve.autoscaling.enabled=true")
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
		r := render(t, "", "serviceMonitor.enabled=false", "prometheusRule.enabled=false", "dashboard.enabled=false", "podDisruptionBudget.enabled=false",
			"connection.kafkaSASL.mechanism=SCRAM-SHA-512", "connection.kafkaSASL.user=tm", "connection.kafkaSASL.passwordSecret=kafka-pw",
			"connection.kafkaCASecret=kafka-ca", "migrate.enabled=false", "serviceAccount.create=false")
		for _, k := range []string{"ServiceMonitor", "PrometheusRule", "PodDisruptionBudget", "Job", "ServiceAccount"} {
			if r.kinds[k] != 0 {
				t.Errorf("%d %s rendered while disabled", r.kinds[k], k)
			}
		}
		if r.kinds["ConfigMap"] != 1 {
			t.Errorf("%d ConfigMaps, want only the config files' with the dashboard off", r.kinds["ConfigMap"])
		}
		c := r.deployments["apply"].Spec.Template.Spec.Containers[0]
		if sa := r.deployments["apply"].Spec.Template.Spec.ServiceAccountName; sa != "default" {
			t.Errorf("apply's ServiceAccount %q with serviceAccount.create=false, want default", sa)
		}
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
		r := render(t, "", "serve.config.request-timeout=2s", "apply.config.max-batch=500", "capture.config.heartbeat=500ms",
			"tracing.endpoint=http://otel-collector:4318", "tracing.sampleRatio=0.25", "config.log-level=debug", "serve.config.log-level=warn")
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
			// config: is every role's; <role>.config wins over it.
			level := map[string]string{"serve": "warn"}[role]
			if level == "" {
				level = "debug"
			}
			if want := "log-level: " + level + " # file"; !strings.Contains(out, want) {
				t.Errorf("%s's config lacks %q:\n%s", role, want, out)
			}
		}
	})
}

// TestChartSchemaRefuses: values.schema.json refuses a wrong type and an
// unknown key, and the chart refuses Kafka TLS off with AWS_MSK_IAM and a
// role's own setting in the common config, each with a message naming the
// value.
func TestChartSchemaRefuses(t *testing.T) {
	for _, c := range []struct {
		set  []string
		want string
	}{
		{[]string{"serve.replicas=three"}, "at '/serve/replicas': got string, want integer"},
		{[]string{"serve.replica=3"}, "at '/serve': additional properties 'replica' not allowed"},
		{[]string{"connection.kafkaSASL.mechanism=SCRAM"}, "at '/connection/kafkaSASL/mechanism'"},
		{[]string{"podAnnotations.x=1"}, "at '/podAnnotations/x': got number, want string"},
		{[]string{"connection.kafkaSASL.mechanism=AWS_MSK_IAM", "connection.kafkaTLS=false"}, "MSK's IAM listener is TLS only"},
		{[]string{"config.linger=5ms"}, "config.linger: capture and apply each take --linger for a setting of their own; set it in capture.config or apply.config"},
		{[]string{"config.max-procs=2"}, "config.max-procs: capture and apply each take --max-procs"},
	} {
		out, err := helmTemplate(t, "", c.set...)
		if err == nil {
			t.Errorf("helm template --set %v rendered (%d bytes), want it refused with %q", c.set, len(out), c.want)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("helm template --set %v: %v\nwant %q", c.set, err, c.want)
			continue
		}
		t.Logf("--set %v: %s", c.set, c.want)
	}
}

// TestChartMigrationJobMigrates runs the migration Job's container as
// rendered (its args, its variables, its DSN file) against a real Postgres
// as the migration role of docs/postgres.md, twice: the first run applies
// the migrations, the second (the next upgrade's hook) has nothing to do.
func TestChartMigrationJobMigrates(t *testing.T) {
	r := render(t, "")
	c := r.jobs["migrate"].Spec.Template.Spec.Containers[0]
	pg := testenv.SharedPostgres(t)
	pg.Exec(t, "postgres", "CREATE DATABASE chart_migrate")
	pg.Exec(t, "postgres", "CREATE ROLE tidemark_migrate LOGIN")
	pg.Exec(t, "postgres", "GRANT CONNECT, CREATE ON DATABASE chart_migrate TO tidemark_migrate")
	dsn := strings.Replace(pg.DSN("chart_migrate"), "postgres://postgres@", "postgres://tidemark_migrate@", 1)
	root := t.TempDir()
	e, _ := env(c, "TIDEMARK_PG_FILE")
	writeFile(t, filepath.Join(root, e.Value), dsn+"\n")
	for i, want := range []string{"applied ", "nothing to do"} {
		cmd := exec.Command(testenv.Binary(t), c.Args...)
		cmd.Env = append(os.Environ(), "TIDEMARK_PG_FILE="+filepath.Join(root, e.Value))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil || !strings.Contains(string(out), want) {
			t.Fatalf("run %d of the migration Job's %v: %v, stdout %q, want %q\n%s", i+1, c.Args, err, out, want, stderr.String())
		}
		t.Logf("run %d: %s", i+1, strings.TrimSpace(string(out)))
	}
}

// secretKeys are the keys of Secret name the pod projects (nil: all or none).
func secretKeys(pod corev1.PodSpec, name string) []string {
	var keys []string
	for _, v := range pod.Volumes {
		if v.Secret != nil && v.Secret.SecretName == name {
			for _, it := range v.Secret.Items {
				keys = append(keys, it.Key)
			}
		}
	}
	return keys
}

// noSecretsInArgv checks that no container passes a secret in argv or in
// a variable's value: the DSNs come from the connection files, the other
// settings from the role's config file, both mounted read-only.
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
			if strings.HasPrefix(e.Name, "TIDEMARK_") && e.ValueFrom != nil {
				t.Errorf("%s: variable %s from %+v: the chart's secrets are mounted as files, not variables", role, e.Name, e.ValueFrom)
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
		if v := mounts["/etc/tidemark/config"]; v.ConfigMap == nil || v.ConfigMap.Name != "rel-tidemark-config" {
			t.Errorf("%s: /etc/tidemark/config is %+v, want the ConfigMap rel-tidemark-config", role, v)
		}
		if d.Spec.Template.Annotations["checksum/config"] == "" || d.Spec.Template.Annotations["checksum/connection"] == "" {
			t.Errorf("%s: annotations %v lack checksum/config or checksum/connection: a changed config would not roll the pods", role, d.Spec.Template.Annotations)
		}
	}
}

// provided says whether the pod has the file at path: under one of the
// container's mounts (a projected Secret only for the keys it projects),
// or under /vault/secrets when a Vault agent is injected.
func provided(tmpl corev1.PodTemplateSpec, c corev1.Container, path string) bool {
	if tmpl.Annotations["vault.hashicorp.com/agent-inject"] == "true" && strings.HasPrefix(path, "/vault/secrets/") {
		return true
	}
	vols := map[string]corev1.Volume{}
	for _, v := range tmpl.Spec.Volumes {
		vols[v.Name] = v
	}
	for _, m := range c.VolumeMounts {
		rel, ok := strings.CutPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/")
		if !ok {
			continue
		}
		v := vols[m.Name]
		if v.Secret == nil || len(v.Secret.Items) == 0 {
			return true
		}
		for _, it := range v.Secret.Items {
			if it.Path == rel {
				return true
			}
		}
	}
	return false
}

// effectiveConfig runs the real binary on role's rendered config file, with
// every file the config file and the variables name in place (each must be
// one the pod has): `tidemark <role> --config F --print-config` must accept
// every key and says where each value came from. redisURL, if given, is
// the Redis URL file's content.
func (r rendered) effectiveConfig(t *testing.T, role string, redisURL ...string) string {
	t.Helper()
	r.noSecretsInArgv(t)
	body := r.configMap(t, "-config").Data[role+".yaml"]
	if body == "" {
		t.Fatalf("no config file for %s in the rendered ConfigMap", role)
	}
	tmpl := r.deployments[role].Spec.Template
	c := tmpl.Spec.Containers[0]
	// The pod's filesystem is root here.
	root := t.TempDir()
	certs, err := localserver.MakeCerts(filepath.Join(t.TempDir(), "certs"))
	if err != nil {
		t.Fatal(err)
	}
	ca := mustRead(t, certs.CA)
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(body), &cfg); err != nil {
		t.Fatalf("%s's config file is not YAML: %v\n%s", role, err, body)
	}
	for k, v := range cfg {
		p, ok := v.(string)
		if !strings.HasSuffix(k, "-file") || !ok {
			continue
		}
		if !provided(tmpl, c, p) {
			t.Errorf("%s's config names %s: %s, which the pod does not mount", role, k, p)
		}
		content := "ksecret\n"
		if strings.Contains(k, "-ca-") {
			content = ca
		}
		writeFile(t, filepath.Join(root, p), content)
		cfg[k] = filepath.Join(root, p)
	}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(root, "etc/tidemark/config", role+".yaml")
	writeFile(t, cfgPath, string(b))
	if !provided(tmpl, c, "/etc/tidemark/config/"+role+".yaml") {
		t.Errorf("%s: the config file is not mounted", role)
	}
	redis := "redis://:rsecret@cache:6379/0\n"
	if len(redisURL) > 0 {
		redis = redisURL[0]
	}
	args := []string{role, "--config", cfgPath, "--print-config"}
	args = append(args, c.Args[2:]...) // the role's extra args, after --config
	cmd := exec.Command(testenv.Binary(t), args...)
	cmd.Env = os.Environ()
	for _, e := range c.Env { // the pod's variables, their files under root
		if e.ValueFrom != nil {
			continue
		}
		v := e.Value
		if strings.HasSuffix(e.Name, "_FILE") {
			if !provided(tmpl, c, v) {
				t.Errorf("%s: %s=%s, which the pod does not mount", role, e.Name, v)
			}
			content := map[string]string{"TIDEMARK_PG_FILE": "postgres://tm:pgsecret@db:5432/catalog\n", "TIDEMARK_REDIS_FILE": redis}[e.Name]
			writeFile(t, filepath.Join(root, v), content)
			v = filepath.Join(root, v)
		}
		cmd.Env = append(cmd.Env, e.Name+"="+v)
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
	return strings.ReplaceAll(string(out), root, "")
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
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

// TestDashboardIsPortable: the dashboard has no fixed uid (two imports,
// one per namespace or Grafana folder, do not collide) and filters every
// query by the Kubernetes namespace, the cache namespace and the topic.
func TestDashboardIsPortable(t *testing.T) {
	var d struct {
		UID        *string `json:"uid"`
		Templating struct {
			List []struct {
				Name string `json:"name"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal([]byte(mustRead(t, "../../compose/grafana/dashboards/tidemark.json")), &d); err != nil {
		t.Fatal(err)
	}
	if d.UID != nil {
		t.Errorf("dashboard uid %q: a fixed uid collides on a second import", *d.UID)
	}
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
	}
	for _, v := range []string{"datasource", "namespace", "cache_namespace", "topic"} {
		if !vars[v] {
			t.Errorf("dashboard lacks the variable $%s", v)
		}
	}
	n := 0
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			n++
			for _, m := range strings.Split(tg.Expr, "tidemark_")[1:] {
				if !strings.Contains(strings.SplitN(m, ")", 2)[0], `namespace=~"$namespace", cache_namespace=~"$cache_namespace", topic=~"$topic"`) {
					t.Errorf("panel %q: %q reads a series without the namespace and topic filters", p.Title, tg.Expr)
					break
				}
			}
		}
	}
	if n < 20 {
		t.Fatalf("read %d queries from the dashboard: the parsing is broken", n)
	}
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
