{{- define "tidemark.fullname" -}}
{{- printf "%s-tidemark" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "tidemark.labels" -}}
app.kubernetes.io/name: tidemark
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "tidemark.selector" -}}
app.kubernetes.io/name: tidemark
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .role }}
{{- end -}}

{{- define "tidemark.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The pods' ServiceAccount: the chart's when it creates one, else the named one or "default". */}}
{{- define "tidemark.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{ .Values.serviceAccount.name | default (include "tidemark.fullname" .) }}
{{- else -}}
{{ .Values.serviceAccount.name | default "default" }}
{{- end -}}
{{- end -}}

{{/*
Kafka TLS: "auto" turns it on with a CA secret or any SASL mechanism
(AWS_MSK_IAM's listener is TLS only; a PLAIN or SCRAM password and an
OAUTHBEARER token must not cross the network in clear, and Confluent Cloud
and MSK take SASL only over TLS). Prints "true" or "".
*/}}
{{- define "tidemark.kafkaTLS" -}}
{{- $c := .Values.connection -}}
{{- $mech := upper $c.kafkaSASL.mechanism -}}
{{- $mode := toString $c.kafkaTLS -}}
{{- if and (eq $mode "false") (eq $mech "AWS_MSK_IAM") -}}
{{- fail "connection.kafkaTLS=false with connection.kafkaSASL.mechanism=AWS_MSK_IAM: MSK's IAM listener is TLS only (leave kafkaTLS auto)" -}}
{{- end -}}
{{- if eq $mode "true" -}}true
{{- else if and (eq $mode "auto") (or $c.kafkaCASecret $mech) -}}true
{{- end -}}
{{- end -}}

{{/*
The connection files a role reads (Postgres DSN key or "", the Redis URL
key or ""): capture and serve each their own Postgres role, the migration
Job the schema owner; apply needs no Postgres, migrate no Redis.
*/}}
{{- define "tidemark.connectionFiles" -}}
{{- $f := .root.Values.connection.files -}}
{{- $pg := dict "capture" $f.capturePG "serve" $f.servePG "migrate" $f.migratePG -}}
{{- $redis := ternary "" $f.redis (eq .role "migrate") -}}
{{- toJson (dict "pg" (get $pg .role | default "") "redis" $redis) -}}
{{- end -}}

{{/*
A role's environment: where its connection files are (the DSN and the
Redis URL are read from them, never passed in argv or in a variable's
value), then .Values.env (name: value, or name: {valueFrom: ...}).
*/}}
{{- define "tidemark.env" -}}
{{- $files := include "tidemark.connectionFiles" . | fromJson -}}
{{- $dir := .root.Values.connection.dir -}}
{{- if $files.pg }}
- name: TIDEMARK_PG_FILE
  value: {{ printf "%s/%s" $dir $files.pg | quote }}
{{- end }}
{{- if $files.redis }}
- name: TIDEMARK_REDIS_FILE
  value: {{ printf "%s/%s" $dir $files.redis | quote }}
{{- end }}
{{- range $k, $v := .root.Values.env }}
- name: {{ $k }}
{{- if kindIs "map" $v }}
  {{- toYaml $v | nindent 2 }}
{{- else }}
  value: {{ $v | toString | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The config file (not in the migration Job), the connection files, the secret files, the writable /tmp a read-only root filesystem needs, and extraVolumeMounts. */}}
{{- define "tidemark.volumeMounts" -}}
{{- $v := .root.Values -}}
- name: tmp
  mountPath: /tmp
{{- if ne .role "migrate" }}
- name: config
  mountPath: /etc/tidemark/config
  readOnly: true
{{- end }}
{{- if $v.connection.existingSecret }}
- name: connection
  mountPath: {{ $v.connection.dir }}
  readOnly: true
{{- end }}
{{- if and (ne .role "migrate") $v.connection.kafkaSASL.passwordSecret }}
- name: kafka-sasl
  mountPath: /etc/tidemark/kafka-sasl
  readOnly: true
{{- end }}
{{- if and (ne .role "migrate") $v.connection.kafkaCASecret }}
- name: kafka-ca
  mountPath: /etc/tidemark/kafka-ca
  readOnly: true
{{- end }}
{{- with $v.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The volumes: the connection Secret projects only the role's own keys. */}}
{{- define "tidemark.volumes" -}}
{{- $root := .root -}}
{{- $v := $root.Values -}}
- name: tmp
  emptyDir: {}
{{- if ne .role "migrate" }}
- name: config
  configMap:
    name: {{ include "tidemark.fullname" $root }}-config
{{- end }}
{{- if $v.connection.existingSecret }}
{{- $files := include "tidemark.connectionFiles" . | fromJson }}
- name: connection
  secret:
    secretName: {{ $v.connection.existingSecret }}
    defaultMode: 0440
    items:
      {{- range $k := list $files.pg $files.redis | compact | uniq }}
      - key: {{ $k }}
        path: {{ $k }}
      {{- end }}
{{- end }}
{{- if and (ne .role "migrate") $v.connection.kafkaSASL.passwordSecret }}
- name: kafka-sasl
  secret:
    secretName: {{ $v.connection.kafkaSASL.passwordSecret }}
    defaultMode: 0440
{{- end }}
{{- if and (ne .role "migrate") $v.connection.kafkaCASecret }}
- name: kafka-ca
  secret:
    secretName: {{ $v.connection.kafkaCASecret }}
{{- end }}
{{- with $v.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
checksum/connection: the connection Secret's data when helm can read it
(install and upgrade against a cluster; `helm template` cannot, and prints
"unknown"), so an upgrade after a rotation rolls the pods. Rotation without
an upgrade is the processes' re-reading of the files on reconnect.
*/}}
{{- define "tidemark.connectionChecksum" -}}
{{- $v := .Values.connection -}}
{{- $s := dict -}}
{{- if $v.existingSecret -}}
{{- $s = lookup "v1" "Secret" .Release.Namespace $v.existingSecret -}}
{{- end -}}
{{- if $s -}}
{{ toJson $s.data | sha256sum }}
{{- else -}}
unknown
{{- end -}}
{{- end -}}

{{/* A pod's annotations: the chart's checksums, podAnnotations, the role's own. */}}
{{- define "tidemark.podAnnotations" -}}
{{- $root := .root -}}
{{- $a := dict -}}
{{- if ne .role "migrate" }}
{{- $_ := set $a "checksum/config" (include (print $root.Template.BasePath "/config.yaml") $root | sha256sum) -}}
{{- end }}
{{- $_ := set $a "checksum/connection" (include "tidemark.connectionChecksum" $root) -}}
{{- $a = merge $a (deepCopy (.values.podAnnotations | default dict)) (deepCopy ($root.Values.podAnnotations | default dict)) -}}
{{- toYaml $a -}}
{{- end -}}

{{/*
Scheduling defaults. Unless the role sets affinity, its pods prefer
distinct nodes. Unless it sets topologySpreadConstraints, capture's two
pods must not share a node where more than one can take them (maxSkew 1 on
the hostname: on a one-node cluster both still run; a rollout's surge pod
still fits on two nodes). A constraint without a labelSelector gets the
role's.
*/}}
{{- define "tidemark.scheduling" -}}
{{- $v := .values -}}
{{- $sel := include "tidemark.selector" . | fromYaml -}}
{{- if $v.affinity }}
affinity:
  {{- toYaml $v.affinity | nindent 2 }}
{{- else }}
affinity:
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          labelSelector:
            matchLabels:
              {{- toYaml $sel | nindent 14 }}
{{- end }}
{{- $tsc := list -}}
{{- range $v.topologySpreadConstraints -}}
{{- $c := deepCopy . -}}
{{- if not (hasKey $c "labelSelector") -}}
{{- $_ := set $c "labelSelector" (dict "matchLabels" $sel) -}}
{{- end -}}
{{- $tsc = append $tsc $c -}}
{{- end -}}
{{- if and (not $tsc) (eq .role "capture") -}}
{{- $tsc = list (dict "maxSkew" 1 "topologyKey" "kubernetes.io/hostname" "whenUnsatisfiable" "DoNotSchedule" "labelSelector" (dict "matchLabels" $sel)) -}}
{{- end -}}
{{- with $tsc }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/*
The pod spec's parts every pod shares, the migration Job's too.
*/}}
{{- define "tidemark.podCommon" -}}
{{- $root := .root -}}
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
automountServiceAccountToken: {{ $root.Values.serviceAccount.automountToken }}
{{- with $root.Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
securityContext:
  {{- toYaml $root.Values.podSecurityContext | nindent 2 }}
{{- with $root.Values.initContainers }}
initContainers:
  {{- toYaml . | nindent 2 }}
{{- end }}
volumes:
  {{- include "tidemark.volumes" . | trim | nindent 2 }}
{{- end -}}

{{/*
A role's Deployment. Probes are httpGet on the metrics port: liveness
/healthz (the process's own loops), readiness /readyz (can do its job now).
The grace period covers the shutdown delay, the role's flush and 10 s of
margin.
*/}}
{{- define "tidemark.deployment" -}}
{{- $root := .root -}}
{{- $v := .values -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "tidemark.fullname" $root }}-{{ .role }}
  labels:
    {{- include "tidemark.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ .role }}
spec:
  {{- if not .hpa }}
  replicas: {{ .replicas }}
  {{- end }}
  {{- with .strategy }}
  strategy:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  selector:
    matchLabels:
      {{- include "tidemark.selector" . | nindent 6 }}
  template:
    metadata:
      labels:
        {{- with $root.Values.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
        {{- include "tidemark.selector" . | nindent 8 }}
      annotations:
        # checksum/config: a changed config file rolls the pods (they read
        # it at start); checksum/connection: so does a changed connection
        # Secret at the next upgrade.
        {{- include "tidemark.podAnnotations" . | nindent 8 }}
    spec:
      serviceAccountName: {{ $v.serviceAccountName | default (include "tidemark.serviceAccountName" $root) }}
      terminationGracePeriodSeconds: {{ add $root.Values.shutdownDelaySeconds $v.flushSeconds 10 }}
      {{- include "tidemark.podCommon" . | trim | nindent 6 }}
      {{- include "tidemark.scheduling" . | trim | nindent 6 }}
      containers:
        - name: {{ .role }}
          image: {{ include "tidemark.image" $root }}
          imagePullPolicy: {{ $root.Values.image.pullPolicy }}
          args:
            {{- toYaml .args | nindent 12 }}
          env:
            {{- include "tidemark.env" . | trim | nindent 12 }}
          {{- with $root.Values.envFrom }}
          envFrom:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          ports:
            - name: metrics
              containerPort: {{ $root.Values.metricsPort }}
            {{- if .apiPort }}
            - name: http
              containerPort: {{ .apiPort }}
            {{- end }}
          livenessProbe:
            httpGet:
              path: /healthz
              port: metrics
            periodSeconds: 10
            timeoutSeconds: 5
            failureThreshold: 6
          readinessProbe:
            httpGet:
              path: /readyz
              port: metrics
            periodSeconds: 5
            timeoutSeconds: 5
            failureThreshold: 2
          startupProbe:
            httpGet:
              path: /healthz
              port: metrics
            periodSeconds: 5
            timeoutSeconds: 5
            failureThreshold: 24
          resources:
            {{- toYaml $v.resources | nindent 12 }}
          securityContext:
            {{- toYaml $root.Values.securityContext | nindent 12 }}
          volumeMounts:
            {{- include "tidemark.volumeMounts" . | trim | nindent 12 }}
{{- end -}}

{{/* A role's PodDisruptionBudget and metrics Service. */}}
{{- define "tidemark.pdb" -}}
{{- if .root.Values.podDisruptionBudget.enabled }}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "tidemark.fullname" .root }}-{{ .role }}
  labels:
    {{- include "tidemark.labels" .root | nindent 4 }}
    app.kubernetes.io/component: {{ .role }}
spec:
  maxUnavailable: 1
  selector:
    matchLabels:
      {{- include "tidemark.selector" . | nindent 6 }}
{{- end }}
---
apiVersion: v1
kind: Service
metadata:
  name: {{ include "tidemark.fullname" .root }}-{{ .role }}-metrics
  labels:
    {{- include "tidemark.labels" .root | nindent 4 }}
    app.kubernetes.io/component: {{ .role }}
    tidemark.io/metrics: "true"
    tidemark.io/job: tidemark-{{ .role }}
spec:
  type: ClusterIP
  selector:
    {{- include "tidemark.selector" . | nindent 4 }}
  ports:
    - name: metrics
      port: {{ .root.Values.metricsPort }}
      targetPort: metrics
{{- end -}}
