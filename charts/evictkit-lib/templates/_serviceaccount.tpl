{{/* Name of the component's ServiceAccount (.Values.serviceAccount.{create,name}). */}}
{{- define "evictkit.serviceAccountName" -}}
{{- $sa := .Values.serviceAccount | default dict -}}
{{- if not (and (hasKey $sa "create") (not $sa.create)) -}}
{{- $sa.name | default (include "evictkit.fullname" .) -}}
{{- else -}}
{{- $sa.name | default "default" -}}
{{- end -}}
{{- end -}}

{{/* The component's ServiceAccount, unless .Values.serviceAccount.create is false. */}}
{{- define "evictkit.serviceAccount" -}}
{{- $sa := .Values.serviceAccount | default dict -}}
{{- if not (and (hasKey $sa "create") (not $sa.create)) }}
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ include "evictkit.serviceAccountName" . }}
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "evictkit.labels" . | nindent 4 }}
  {{- with $sa.annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
automountServiceAccountToken: true
{{- end }}
{{- end -}}
