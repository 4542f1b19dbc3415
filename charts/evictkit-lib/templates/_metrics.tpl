{{/* The plain-HTTP port every binary serves /metrics, /healthz and /readyz on
(.Values.metrics.port, default 8080); the Service's port too. */}}
{{- define "evictkit.metricsPort" -}}
{{- $metrics := .Values.metrics | default dict -}}
{{- $metrics.port | default 8080 | int -}}
{{- end -}}

{{/* A Service in front of the metrics port, with the prometheus.io scrape annotations.
.Values.metrics.service.{enabled (default true), annotations}. */}}
{{- define "evictkit.metricsService" -}}
{{- $metrics := .Values.metrics | default dict -}}
{{- $service := $metrics.service | default dict -}}
{{- if not (and (hasKey $service "enabled") (not $service.enabled)) }}
apiVersion: v1
kind: Service
metadata:
  name: {{ include "evictkit.fullname" . }}-metrics
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "evictkit.labels" . | nindent 4 }}
  annotations:
    prometheus.io/scrape: "true"
    prometheus.io/port: {{ include "evictkit.metricsPort" . | quote }}
    prometheus.io/path: /metrics
    {{- with $service.annotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  type: ClusterIP
  selector:
    {{- include "evictkit.selectorLabels" . | nindent 4 }}
  ports:
    - name: metrics
      port: {{ include "evictkit.metricsPort" . }}
      targetPort: metrics
      protocol: TCP
{{- end }}
{{- end -}}
