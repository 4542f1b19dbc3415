{{/*
ClusterRoles that add a chart's CRDs to Kubernetes' default user-facing roles through their
aggregation labels (kube-controller-manager's clusterrole-aggregation controller copies the
rules into view, edit and admin): a user bound to view reads the objects, one bound to edit or
admin also writes them, as they do Kubernetes' own kinds. Rendered by the chart that owns the
CRDs, unless .Values.rbac.aggregateClusterRoles is false.

  {{ include "evictkit.aggregatedClusterRoles" (dict "context" . "resources" (list "taintevictionpolicies")) }}

The resources are in evictkit.io; the status subresource stays the controllers'.
*/}}
{{- define "evictkit.aggregatedClusterRoles" -}}
{{- $root := .context -}}
{{- $resources := .resources -}}
{{- $rbac := $root.Values.rbac | default dict -}}
{{- if or (not (hasKey $rbac "aggregateClusterRoles")) $rbac.aggregateClusterRoles }}
{{- $fullname := include "evictkit.fullname" $root }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ printf "%s-view" $fullname | trunc 63 | trimSuffix "-" }}
  labels:
    {{- include "evictkit.labels" $root | nindent 4 }}
    rbac.authorization.k8s.io/aggregate-to-view: "true"
rules:
  - apiGroups: [evictkit.io]
    resources: {{ toJson $resources }}
    verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ printf "%s-edit" $fullname | trunc 63 | trimSuffix "-" }}
  labels:
    {{- include "evictkit.labels" $root | nindent 4 }}
    rbac.authorization.k8s.io/aggregate-to-edit: "true"
    rbac.authorization.k8s.io/aggregate-to-admin: "true"
rules:
  - apiGroups: [evictkit.io]
    resources: {{ toJson $resources }}
    verbs: [get, list, watch, create, update, patch, delete]
{{- end }}
{{- end -}}
