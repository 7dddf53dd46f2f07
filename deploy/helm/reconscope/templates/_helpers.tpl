{{/* The agent's objects: RELEASE-agent (reconscope-agent for a release named reconscope), or
fullnameOverride; nameOverride replaces "agent". */}}
{{- define "reconscope.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (.Values.nameOverride | default "agent") | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "reconscope.configName" -}}
{{- if .Values.fullnameOverride -}}
{{- printf "%s-config" .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-config" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The ServiceAccount the agent runs as: the chart's (serviceAccount.create), or yours. */}}
{{- define "reconscope.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.name | default (include "reconscope.fullname" .) -}}
{{- else -}}
{{- required "serviceAccount.create=false needs serviceAccount.name: the ServiceAccount the agent runs as" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The selector: stable for a release's life (a DaemonSet's selector cannot change). */}}
{{- define "reconscope.selectorLabels" -}}
app.kubernetes.io/name: reconscope-agent
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Labels of every object but the pod template: with the chart's version, which changes at
each chart release. The pod template has only the selector labels (and podLabels), so that an
upgrade that changes nothing in the pod does not roll every agent. */}}
{{- define "reconscope.labels" -}}
{{ include "reconscope.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "reconscope.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/* The discovery part of the config file (config.yaml of the ConfigMap), which the agent
reads at start. Its checksum, and nothing else, is the pod template's checksum/config
annotation. */}}
{{- define "reconscope.configYAML" -}}
include: {{- toYaml (.Values.config.include | default list) | nindent 2 }}
exclude: {{- toYaml (.Values.config.exclude | default list) | nindent 2 }}
{{- end -}}

{{/* The detail section of the config file (values detail and detailFor), which the running
agents reload (--detail and --detail-for in the file's form): not in the checksum. */}}
{{- define "reconscope.configDetailYAML" -}}
{{- if or .Values.detail .Values.detailFor }}
detail:
  {{- with .Values.detail }}
  default: {{ . }}
  {{- end }}
  {{- with .Values.detailFor }}
  controllers: {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
{{- end -}}
