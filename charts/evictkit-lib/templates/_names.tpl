{{/*
Names and labels. Every helper takes the chart's root context (`.`), so a component subchart
calls them as `include "evictkit.labels" .`. The component is the subchart's name in kebab case (the umbrella aliases subcharts in camelCase) unless
`.Values.component` overrides it.
*/}}

{{/* The component name, e.g. "taint-manager". */}}
{{- define "evictkit.component" -}}
{{- default (kebabcase .Chart.Name) .Values.component | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Name of the component's objects: "<release>-<component>", or .Values.fullnameOverride. */}}
{{- define "evictkit.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $component := include "evictkit.component" . -}}
{{- if contains $component .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $component | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Labels that select the component's pods; never change them after a release exists. */}}
{{- define "evictkit.selectorLabels" -}}
app.kubernetes.io/name: {{ include "evictkit.component" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Standard labels of every object a component chart renders. */}}
{{- define "evictkit.labels" -}}
{{ include "evictkit.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | default .Chart.Version | quote }}
app.kubernetes.io/component: {{ include "evictkit.component" . }}
app.kubernetes.io/part-of: evictkit
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end -}}

{{/* The container image: "<registry>/<repository>:<tag>", the registry (a host and path, e.g.
ghcr.io/evictkit) global.imageRegistry when set, else .Values.image.registry; the repository the
component's name unless .Values.image.repository names another; the tag the chart's appVersion
unless .Values.image.tag is set. */}}
{{- define "evictkit.image" -}}
{{- $image := .Values.image | default dict -}}
{{- $global := .Values.global | default dict -}}
{{- $registry := $global.imageRegistry | default $image.registry | trimSuffix "/" -}}
{{- $repository := $image.repository | default (include "evictkit.component" .) -}}
{{- $tag := $image.tag | default .Chart.AppVersion -}}
{{- if $registry -}}
{{- printf "%s/%s:%s" $registry $repository $tag -}}
{{- else -}}
{{- printf "%s:%s" $repository $tag -}}
{{- end -}}
{{- end -}}
