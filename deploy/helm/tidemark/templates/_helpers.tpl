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

{{/*
Environment every process shares: where the connection Secret's files are
(the DSN and the Redis URL are read from them, never passed in argv or in a
variable's value), and the extra variables of .Values.env.
*/}}
{{- define "tidemark.env" -}}
- name: TIDEMARK_PG_FILE
  value: /etc/tidemark/connection/pg
- name: TIDEMARK_REDIS_FILE
  value: /etc/tidemark/connection/redis
{{- range $k, $v := .Values.env }}
- name: {{ $k }}
  value: {{ $v | quote }}
{{- end }}
{{- end -}}

{{/* The config file, the secret files, and the writable /tmp a read-only root filesystem needs. */}}
{{- define "tidemark.volumeMounts" -}}
- name: tmp
  mountPath: /tmp
- name: config
  mountPath: /etc/tidemark/config
  readOnly: true
- name: connection
  mountPath: /etc/tidemark/connection
  readOnly: true
{{- if .Values.connection.kafkaSASL.passwordSecret }}
- name: kafka-sasl
  mountPath: /etc/tidemark/kafka-sasl
  readOnly: true
{{- end }}
{{- if .Values.connection.kafkaCASecret }}
- name: kafka-ca
  mountPath: /etc/tidemark/kafka-ca
  readOnly: true
{{- end }}
{{- end -}}

{{- define "tidemark.volumes" -}}
- name: tmp
  emptyDir: {}
- name: config
  configMap:
    name: {{ include "tidemark.fullname" . }}-config
- name: connection
  secret:
    secretName: {{ .Values.connection.existingSecret }}
    defaultMode: 0440
{{- if .Values.connection.kafkaSASL.passwordSecret }}
- name: kafka-sasl
  secret:
    secretName: {{ .Values.connection.kafkaSASL.passwordSecret }}
    defaultMode: 0440
{{- end }}
{{- if .Values.connection.kafkaCASecret }}
- name: kafka-ca
  secret:
    secretName: {{ .Values.connection.kafkaCASecret }}
{{- end }}
{{- end -}}

{{/*
A role's Deployment. Probes: liveness /healthz (the process's own loops),
readiness /readyz (can do its job now), both through `tidemark healthcheck`
(the image has no shell). The grace period covers the shutdown delay, the
role's flush and 10 s of margin.
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
        {{- include "tidemark.selector" . | nindent 8 }}
      annotations:
        # A changed config file rolls the pods (they read it at start).
        checksum/config: {{ include (print $root.Template.BasePath "/config.yaml") $root | sha256sum }}
    spec:
      {{- with $root.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      automountServiceAccountToken: false
      terminationGracePeriodSeconds: {{ add $root.Values.shutdownDelaySeconds $v.flushSeconds 10 }}
      securityContext:
        {{- toYaml $root.Values.podSecurityContext | nindent 8 }}
      containers:
        - name: {{ .role }}
          image: {{ include "tidemark.image" $root }}
          imagePullPolicy: {{ $root.Values.image.pullPolicy }}
          args:
            {{- toYaml .args | nindent 12 }}
          env:
            {{- include "tidemark.env" $root | nindent 12 }}
          ports:
            - name: metrics
              containerPort: {{ $root.Values.metricsPort }}
            {{- if .apiPort }}
            - name: http
              containerPort: {{ .apiPort }}
            {{- end }}
          livenessProbe:
            exec:
              command: ["/tidemark", "healthcheck", "--url", "http://127.0.0.1:{{ $root.Values.metricsPort }}/healthz"]
            periodSeconds: 10
            timeoutSeconds: 5
            failureThreshold: 6
          readinessProbe:
            exec:
              command: ["/tidemark", "healthcheck", "--url", "http://127.0.0.1:{{ $root.Values.metricsPort }}/readyz"]
            periodSeconds: 5
            timeoutSeconds: 5
            failureThreshold: 2
          startupProbe:
            exec:
              command: ["/tidemark", "healthcheck", "--url", "http://127.0.0.1:{{ $root.Values.metricsPort }}/healthz"]
            periodSeconds: 5
            timeoutSeconds: 5
            failureThreshold: 24
          resources:
            {{- toYaml $v.resources | nindent 12 }}
          securityContext:
            {{- toYaml $root.Values.securityContext | nindent 12 }}
          volumeMounts:
            {{- include "tidemark.volumeMounts" $root | nindent 12 }}
      volumes:
        {{- include "tidemark.volumes" $root | nindent 8 }}
      {{- with $v.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
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
