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

{{/* The chart's standard labels, then global.commonLabels merged with the chart's own
commonLabels (the chart's win on the same key; neither replaces a standard label). Every object
and pod template carries them; selectors never do (evictkit.selectorLabels), so changing them
never orphans a release's pods. */}}
{{- define "evictkit.labels" -}}
{{- $standard := include "evictkit.standardLabels" . | fromYaml -}}
{{- toYaml (merge $standard (include "evictkit.commonLabels" . | fromYaml)) -}}
{{- end -}}

{{- define "evictkit.standardLabels" -}}
{{ include "evictkit.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | default .Chart.Version | quote }}
app.kubernetes.io/component: {{ include "evictkit.component" . }}
app.kubernetes.io/part-of: evictkit
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end -}}

{{/* global.commonLabels merged with .Values.commonLabels, the chart's own winning. */}}
{{- define "evictkit.commonLabels" -}}
{{- $global := .Values.global | default dict -}}
{{- toYaml (merge (deepCopy (.Values.commonLabels | default dict)) ($global.commonLabels | default dict)) -}}
{{- end -}}

{{/* The container image: "<registry>/<repository>:<tag>", or "<registry>/<repository>@<digest>"
when .Values.image.digest is set (the digest pins the image; a tag would only name it). The
registry (a host and path, e.g. ghcr.io/evictkit) is global.imageRegistry when set, else
.Values.image.registry; the repository the component's name unless .Values.image.repository
names another; the tag the chart's appVersion unless .Values.image.tag is set. */}}
{{- define "evictkit.image" -}}
{{- $image := .Values.image | default dict -}}
{{- $global := .Values.global | default dict -}}
{{- $registry := $global.imageRegistry | default $image.registry | trimSuffix "/" -}}
{{- $repository := $image.repository | default (include "evictkit.component" .) -}}
{{- if $registry -}}
{{- $repository = printf "%s/%s" $registry $repository -}}
{{- end -}}
{{- if $image.digest -}}
{{- printf "%s@%s" $repository $image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repository ($image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}
