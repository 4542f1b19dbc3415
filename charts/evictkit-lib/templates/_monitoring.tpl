{{/*
Prometheus Operator objects of a component: a ServiceMonitor for its metrics Service
(.Values.metrics.serviceMonitor.{enabled, interval, additionalLabels}) and a PrometheusRule with
its alerts (.Values.metrics.prometheusRule.{enabled, additionalLabels, alerts}).

Call with a dict: `include "evictkit.monitoring" (dict "root" . "alerts" $alerts)`, where $alerts
is the component's own rules as a YAML list (a string). Every component also gets the alerts of
"evictkit.commonAlerts". Each alert gets a runbook_url, its section of
docs/operate/<chart>.md (`#` and the alert's name in lower case, as GitHub makes the anchor of
a `### <alert>` heading), and is left out when
.Values.metrics.prometheusRule.alerts.<alert>.enabled is false (each chart's schema lists its
alerts). `cargo xtask check-alerts` tests the rendered rules with promtool.
*/}}
{{- define "evictkit.monitoring" -}}
{{- $root := .root -}}
{{- $metrics := $root.Values.metrics | default dict -}}
{{- $service := $metrics.service | default dict -}}
{{- $serviceMonitor := $metrics.serviceMonitor | default dict -}}
{{- $prometheusRule := $metrics.prometheusRule | default dict -}}
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
{{- $common := include "evictkit.commonAlerts" $root }}
{{- $switches := $prometheusRule.alerts | default dict }}
{{- $rules := list }}
{{- range $rule := fromYamlArray (printf "%s\n%s" $common (.alerts | default "")) }}
{{- $switch := get $switches $rule.alert | default dict }}
{{- if or (not (hasKey $switch "enabled")) $switch.enabled }}
{{- $runbook := printf "%s/blob/main/docs/operate/%s.md#%s" ($root.Chart.Home | default "https://github.com/evictkit/evictkit") $root.Chart.Name (lower $rule.alert) }}
{{- $_ := set $rule "annotations" (set ($rule.annotations | default dict) "runbook_url" $runbook) }}
{{- $rules = append $rules $rule }}
{{- end }}
{{- end }}
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
        {{- toYaml $rules | nindent 8 }}
{{- end }}
{{- end -}}

{{/* The alerts every component has, as a YAML list: EvictkitDown (no replica's series at all,
the one alert that fires when every replica is gone), the no-leader alert while leader election
is on (without a leader, its controller acts nowhere), and the webhook-errors alert while it
serves webhooks (.Values.webhook.enabled). */}}
{{- define "evictkit.commonAlerts" -}}
{{- $leaderElection := .Values.leaderElection | default dict -}}
{{- $webhook := .Values.webhook | default dict -}}
{{- $selector := include "evictkit.metricsSelector" . -}}
- alert: EvictkitDown
  # absent() of a selector with only equality matchers carries their labels (namespace, service).
  expr: absent(evictkit_build_info{ {{- $selector -}} })
  for: 5m
  labels:
    severity: critical
  annotations:
    summary: No replica of {{ include "evictkit.component" . }} has been scraped for 5 minutes.
    description: >-
      Prometheus has had no series of {{ include "evictkit.fullname" . }} in
      {{ .Release.Namespace }} for 5 minutes: no replica runs, none is ready, or the metrics
      Service {{ include "evictkit.fullname" . }}-metrics is not scraped. While this fires, the
      component's other alerts cannot.
{{- if or (not (hasKey $leaderElection "enabled")) $leaderElection.enabled }}
- alert: EvictkitNoLeader
  expr: max by (namespace, service) (evictkit_leader{ {{- $selector -}} }) < 1
  for: 5m
  labels:
    severity: critical
  annotations:
    summary: No replica of {{ include "evictkit.component" . }} holds its Lease.
    description: >-
      No replica of {{ include "evictkit.fullname" . }} in {{ .Release.Namespace }}
      has held the leader-election Lease for 5 minutes, so its controller acts nowhere.
      Look for Lease errors in the pods' logs (RBAC on coordination.k8s.io leases, an
      unreachable apiserver) and at evictkit_leader_terms_lost_total.
{{- end }}
{{- if $webhook.enabled }}
- alert: EvictkitWebhookErrors
  expr: sum by (namespace, service, webhook) (rate(evictkit_admission_review_errors_total{ {{- $selector -}} }[5m])) > 0
  for: 10m
  labels:
    severity: warning
  annotations:
    summary: A webhook of {{ include "evictkit.component" . }} cannot decide the reviews it gets.
    description: >-
      {{ include "evictkit.fullname" . }} has denied AdmissionReviews at
      {{ "{{" }} $labels.webhook {{ "}}" }} for 10 minutes because it could not decide
      them (a read of the Kubernetes API failed or would have outlasted the apiserver's
      timeout, or the review was unreadable); what the webhook guards waits meanwhile.
      Its log names the objects and the errors.
{{- end }}
{{- end -}}

{{/* The series of this release's component, for the alerts' label matchers: the target labels
`namespace` and `service` (the metrics Service's name) that both the Prometheus Operator's
ServiceMonitor and the usual annotation-based scrape config (prometheus.io/scrape on Services,
the kubernetes-service-endpoints job) give every series. Not `job`: the annotation-based config
names it after itself. The components' own labels never use a target label's name
(crates/runtime/src/process/metrics.rs), so these are never renamed to exported_*. */}}
{{- define "evictkit.metricsSelector" -}}
namespace="{{ .Release.Namespace }}",service="{{ include "evictkit.fullname" . }}-metrics"
{{- end -}}
