{{/* The usernames whose evictions the bridge intercepts: the descheduler's ServiceAccount plus
descheduler.extraUsers, as a list. */}}
{{- define "descheduler-bridge.users" -}}
{{- $sa := .Values.descheduler.serviceAccount -}}
{{- $users := list (printf "system:serviceaccount:%s:%s" $sa.namespace $sa.name) -}}
{{- toJson (concat $users (.Values.descheduler.extraUsers | default list)) -}}
{{- end -}}
