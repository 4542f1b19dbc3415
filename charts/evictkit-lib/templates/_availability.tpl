{{/*
A PodDisruptionBudget over the component's pods, so a node drain never takes every replica
at once. .Values.podDisruptionBudget.{enabled (default true), maxUnavailable (default 1)};
rendered only with more than one replica: a budget over a single pod either blocks every
drain (nothing may go) or protects nothing (the one pod may go).
*/}}
{{- define "evictkit.podDisruptionBudget" -}}
{{- $budget := .Values.podDisruptionBudget | default dict -}}
{{- $enabled := not (and (hasKey $budget "enabled") (not $budget.enabled)) -}}
{{- if and $enabled (gt (int (.Values.replicas | default 1)) 1) }}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "evictkit.fullname" . }}
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "evictkit.labels" . | nindent 4 }}
spec:
  maxUnavailable: {{ ternary $budget.maxUnavailable 1 (hasKey $budget "maxUnavailable") }}
  selector:
    matchLabels:
      {{- include "evictkit.selectorLabels" . | nindent 6 }}
{{- end }}
{{- end -}}
