{{/*
Prometheus Operator objects of a component: a ServiceMonitor for its metrics Service
(.Values.metrics.serviceMonitor.{enabled, interval, additionalLabels}) and a PrometheusRule with
its alerts (.Values.metrics.prometheusRule.{enabled, additionalLabels}).

Call with a dict: `include "evictkit.monitoring" (dict "root" . "alerts" $alerts)`, where $alerts
is the component's own rules as a YAML list (a string). Every component also gets the no-leader
alert while leader election is on (without a leader, its controller acts nowhere), and the
webhook-errors alert while it serves webhooks (.Values.webhook.enabled).
*/}}
{{- define "evictkit.monitoring" -}}
{{- $root := .root -}}
{{- $metrics := $root.Values.metrics | default dict -}}
{{- $service := $metrics.service | default dict -}}
{{- $serviceMonitor := $metrics.serviceMonitor | default dict -}}
{{- $prometheusRule := $metrics.prometheusRule | default dict -}}
{{- $leaderElection := $root.Values.leaderElection | default dict -}}
{{- $webhook := $root.Values.webhook | default dict -}}
{{- if $serviceMonitor.enabled }}
{{- if and (hasKey $service "enabled") (not $service.enabled) }}
{{- fail "metrics.serviceMonitor.enabled needs metrics.service.enabled: the ServiceMonitor selects that Service" }}
{{- end }}
---
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata:
  name: {{ include "evictkit.fullname" $root }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "evictkit.labels" $root | nindent 4 }}
    {{- with $serviceMonitor.additionalLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  namespaceSelector:
    matchNames:
      - {{ $root.Release.Namespace }}
  selector:
    matchLabels:
      {{- include "evictkit.selectorLabels" $root | nindent 6 }}
  endpoints:
    # Only the metrics Service has this port; the webhook Service carries the same labels.
    - port: metrics
      path: /metrics
      interval: {{ $serviceMonitor.interval | default "30s" }}
{{- end }}
{{- if $prometheusRule.enabled }}
---
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: {{ include "evictkit.fullname" $root }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "evictkit.labels" $root | nindent 4 }}
    {{- with $prometheusRule.additionalLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  groups:
    - name: {{ include "evictkit.component" $root }}
      rules:
        {{- if or (not (hasKey $leaderElection "enabled")) $leaderElection.enabled }}
        - alert: EvictkitNoLeader
          expr: max by (namespace, job) (evictkit_leader{ {{- include "evictkit.metricsSelector" $root -}} }) < 1
          for: 5m
          labels:
            severity: critical
          annotations:
            summary: No replica of {{ include "evictkit.component" $root }} holds its Lease.
            description: >-
              No replica of {{ include "evictkit.fullname" $root }} in {{ $root.Release.Namespace }}
              has held the leader-election Lease for 5 minutes, so its controller acts nowhere.
              Look for Lease errors in the pods' logs (RBAC on coordination.k8s.io leases, an
              unreachable apiserver) and at evictkit_leader_terms_lost_total.
        {{- end }}
        {{- if $webhook.enabled }}
        - alert: EvictkitWebhookErrors
          expr: sum by (namespace, job, webhook) (rate(evictkit_admission_review_errors_total{ {{- include "evictkit.metricsSelector" $root -}} }[5m])) > 0
          for: 10m
          labels:
            severity: warning
          annotations:
            summary: A webhook of {{ include "evictkit.component" $root }} cannot decide the reviews it gets.
            description: >-
              {{ include "evictkit.fullname" $root }} has denied AdmissionReviews at
              {{ "{{" }} $labels.webhook {{ "}}" }} for 10 minutes because it could not decide
              them (a read of the Kubernetes API failed or would have outlasted the apiserver's
              timeout, or the review was unreadable); what the webhook guards waits meanwhile.
              Its log names the objects and the errors.
        {{- end }}
        {{- with .alerts }}
        {{- . | nindent 8 }}
        {{- end }}
{{- end }}
{{- end -}}

{{/* The series of this release's component as scraped through its ServiceMonitor (Prometheus
Operator names the job after the Service), for the alerts' label matchers. */}}
{{- define "evictkit.metricsSelector" -}}
job="{{ include "evictkit.fullname" . }}-metrics",namespace="{{ .Release.Namespace }}"
{{- end -}}
