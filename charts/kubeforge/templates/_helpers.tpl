{{/* Chart name, truncated to 63 characters (a DNS label). */}}
{{- define "kubeforge.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: <release>-<chart>, or the release name when it contains the chart name. */}}
{{- define "kubeforge.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* chart label value: name-version. */}}
{{- define "kubeforge.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels on every object of the release. */}}
{{- define "kubeforge.labels" -}}
helm.sh/chart: {{ include "kubeforge.chart" . }}
{{ include "kubeforge.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kubeforge
{{- end }}

{{/* Selector labels (immutable in a Deployment: never add to them). */}}
{{- define "kubeforge.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kubeforge.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{/* The operator's ServiceAccount name. */}}
{{- define "kubeforge.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "kubeforge.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The image reference: repository@digest, else repository:tag (tag defaults to appVersion). */}}
{{- define "kubeforge.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* The operator's arguments after the `kubeforge` entrypoint (the Dockerfile's ENTRYPOINT/CMD). */}}
{{- define "kubeforge.args" -}}
- run
{{- range .Values.watchNamespaces }}
- --namespace={{ . }}
{{- end }}
- --health-address=0.0.0.0:{{ .Values.health.port }}
- --metrics-port={{ .Values.metrics.port }}
{{- if .Values.leaderElection.enabled }}
- --leader-election
- --lease-name={{ include "kubeforge.leaseName" . }}
{{- end }}
{{- range .Values.prometheus.allowedURLs }}
- --prometheus-url-allow={{ . }}
{{- end }}
{{- if .Values.activator.enabled }}
- --activator-service={{ .Release.Namespace }}/{{ include "kubeforge.activatorName" . }}
{{- end }}
{{- if .Values.status.enabled }}
- --status-address=0.0.0.0:{{ .Values.status.port }}
- --status-url=https://{{ include "kubeforge.statusName" . }}.{{ .Release.Namespace }}.svc:{{ .Values.status.port }}
- --status-tls-secret={{ .Release.Namespace }}/{{ include "kubeforge.statusName" . }}-tls
- --progress-write-seconds={{ .Values.status.progressWriteSeconds }}
{{- if not .Values.status.workerReporting }}
- --no-worker-reporting
{{- end }}
{{- else }}
- --status-address=
{{- end }}
{{- if or .Values.verbose (eq .Values.logLevel "debug") }}
- --verbose
{{- end }}
{{- end }}

{{/* The leader Lease's name. */}}
{{- define "kubeforge.leaseName" -}}
{{- default (include "kubeforge.fullname" .) .Values.leaderElection.leaseName }}
{{- end }}

{{/* The activator's name (Deployment, Service, ServiceAccount, RBAC): <fullname>-activator. */}}
{{- define "kubeforge.activatorName" -}}
{{- printf "%s-activator" (include "kubeforge.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Selector labels of the activator pods (immutable in a Deployment: never add to them). */}}
{{- define "kubeforge.activatorSelectorLabels" -}}
app.kubernetes.io/name: {{ include "kubeforge.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: activator
{{- end }}

{{/* Labels on every activator object. */}}
{{- define "kubeforge.activatorLabels" -}}
helm.sh/chart: {{ include "kubeforge.chart" . }}
{{ include "kubeforge.activatorSelectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kubeforge
{{- end }}

{{/* The activator's ServiceAccount: its own when serviceAccount.create, else the operator's. */}}
{{- define "kubeforge.activatorServiceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- include "kubeforge.activatorName" . }}
{{- else }}
{{- include "kubeforge.serviceAccountName" . }}
{{- end }}
{{- end }}

{{/* The status endpoint's name (Service; the TLS Secret is <name>-tls): <fullname>-status. */}}
{{- define "kubeforge.statusName" -}}
{{- printf "%s-status" (include "kubeforge.fullname" .) | trunc 59 | trimSuffix "-" }}
{{- end }}

{{/* Labels on the status endpoint's own objects (its Service, the TLS Secret's Role). */}}
{{- define "kubeforge.statusLabels" -}}
helm.sh/chart: {{ include "kubeforge.chart" . }}
app.kubernetes.io/name: {{ include "kubeforge.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: status
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kubeforge
{{- end }}
