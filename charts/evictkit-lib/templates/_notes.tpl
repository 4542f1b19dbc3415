{{/*
The body of every component chart's NOTES.txt: what was installed and how to see it run.
The umbrella's NOTES.txt prints the same lines for each enabled component.
*/}}
{{- define "evictkit.notes" -}}
{{- $component := include "evictkit.component" . -}}
{{- $webhook := .Values.webhook | default dict -}}
{{ $component }} {{ .Chart.AppVersion }} is installed as release {{ .Release.Name }} in namespace {{ .Release.Namespace }}: {{ .Values.replicas | default 1 }} replica(s) of Deployment {{ include "evictkit.fullname" . }}
{{- if $webhook.enabled }}, serving its admission webhooks on port {{ include "evictkit.webhookPort" . }} (Service {{ include "evictkit.webhookServiceName" . }}){{ end }}.

Check that it runs:
  kubectl -n {{ .Release.Namespace }} get pods -l app.kubernetes.io/name={{ $component }},app.kubernetes.io/instance={{ .Release.Name }}
Metrics, /healthz and /readyz on port {{ include "evictkit.metricsPort" . }}:
  kubectl -n {{ .Release.Namespace }} port-forward deploy/{{ include "evictkit.fullname" . }} {{ include "evictkit.metricsPort" . }} &
  curl -s localhost:{{ include "evictkit.metricsPort" . }}/metrics
{{- end -}}
