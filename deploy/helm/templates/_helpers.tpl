{{/* The chart's name, or nameOverride. */}}
{{- define "tally.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The base of every name the chart gives: fullnameOverride, or the release's
name when it already holds the chart's, or release-chart. Kept to 50
characters so that a suffix (-intake-admin) stays within the 63 of a name.
*/}}
{{- define "tally.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The labels of everything the chart makes. */}}
{{- define "tally.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "tally.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ include "tally.imageTag" . | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The labels that select a component's pods: (dict "root" $ "component" "intake"). */}}
{{- define "tally.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tally.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* The image's tag: image.tag, or the chart's appVersion. */}}
{{- define "tally.imageTag" -}}
{{- default .Chart.AppVersion .Values.image.tag }}
{{- end }}

{{/* The image's reference: REPOSITORY:TAG, or REPOSITORY:TAG@DIGEST. */}}
{{- define "tally.image" -}}
{{- $ref := printf "%s:%s" .Values.image.repository (include "tally.imageTag" .) }}
{{- if .Values.image.digest }}
{{- $ref = printf "%s@%s" $ref .Values.image.digest }}
{{- end }}
{{- $ref }}
{{- end }}

{{/* The Secret of the URLs and keys: existingSecret, or the chart's. */}}
{{- define "tally.secretName" -}}
{{- default (include "tally.fullname" .) .Values.secrets.existingSecret }}
{{- end }}

{{/* Whether intake is given a credential key. */}}
{{- define "tally.hasCredentialKey" -}}
{{- if or .Values.secrets.existingSecret .Values.secrets.credentialKey }}true{{ end }}
{{- end }}

{{/* Whether the projector is given a log key. */}}
{{- define "tally.hasLogKey" -}}
{{- if or .Values.secrets.existingSecret .Values.secrets.logKey }}true{{ end }}
{{- end }}

{{/* The environment both daemons share: the settings of config, and the URLs from the Secret. */}}
{{- define "tally.commonEnv" -}}
- name: TALLY_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "tally.secretName" . }}
      key: database-url
- name: TALLY_REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "tally.secretName" . }}
      key: redis-url
- name: TALLY_REDIS_MODE
  value: {{ .Values.config.redisMode | quote }}
- name: TALLY_STREAM_PREFIX
  value: {{ .Values.config.streamPrefix | quote }}
- name: TALLY_SHARDS
  value: {{ .Values.config.shards | quote }}
- name: TALLY_LOG_FORMAT
  value: {{ .Values.config.logFormat | quote }}
- name: TALLY_LOG_LEVEL
  value: {{ .Values.config.logLevel | quote }}
- name: TALLY_STARTUP_WAIT
  value: {{ .Values.config.startupWait | quote }}
{{- end }}

{{/*
What every pod of the chart shares: no service account token, no service
links (Kubernetes would set TALLY_*_PORT and _SERVICE_HOST variables for
the release's Services, beside the daemons' own TALLY_* settings), the
security context, the pull secrets.
*/}}
{{- define "tally.podCommon" -}}
automountServiceAccountToken: false
enableServiceLinks: false
{{- with .Values.serviceAccountName }}
serviceAccountName: {{ . }}
{{- end }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- end }}

{{/* Where a component's pods may run: its nodeSelector, tolerations, affinity, spread. */}}
{{- define "tally.placement" -}}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
