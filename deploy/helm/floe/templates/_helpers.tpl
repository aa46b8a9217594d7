{{- define "floe.fullname" -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "floe.headless" -}}
{{- printf "%s-peers" (include "floe.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "floe.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "floe.selector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: proxy
{{- end -}}

{{- define "floe.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* A fleet when more than one proxy runs. */}}
{{- define "floe.fleet" -}}
{{- if gt (int .Values.replicas) 1 }}true{{ end -}}
{{- end -}}

{{/* The cache volume: disk ceilings, the write-back ceiling, and headroom, in bytes. */}}
{{- define "floe.volumeBytes" -}}
{{- $disk := add .Values.cache.data.diskBytes .Values.cache.metadata.diskBytes -}}
{{- if .Values.writeback.enabled }}{{ $disk = add $disk .Values.writeback.capacityBytes }}{{ end -}}
{{- div (mul $disk (add 100 .Values.storage.headroomPercent)) 100 -}}
{{- end -}}

{{/* The memory request: DRAM ceilings plus the overhead, in bytes. */}}
{{- define "floe.memoryBytes" -}}
{{- add .Values.cache.data.dramBytes .Values.cache.metadata.dramBytes .Values.resources.memoryOverheadBytes -}}
{{- end -}}
