{{/*
The CRDs a component chart owns, from its files/crds/*.yaml (written there by cargo xtask
gen-crds from crates/api; never edited by hand). They are templates, not Helm's crds/
directory, so that `helm upgrade` applies a changed CRD too.

Values (.Values.crds):
  install: true     false: no CRD is rendered (they are managed elsewhere, e.g. applied from
                    the repository's crds/ before the chart)
  keep: true        helm.sh/resource-policy: keep, so `helm uninstall` (or the umbrella turning
                    the component off) leaves the CRD and every object users wrote; false: the
                    CRD, and with it every such object, goes with the release
*/}}
{{- define "evictkit.crds" -}}
{{- $crds := .Values.crds | default dict -}}
{{- if or (not (hasKey $crds "install")) $crds.install }}
{{- $keep := or (not (hasKey $crds "keep")) $crds.keep }}
{{- $labels := include "evictkit.labels" . | fromYaml }}
{{- range $path, $_ := .Files.Glob "files/crds/*.yaml" }}
{{- $crd := $.Files.Get $path | fromYaml }}
{{- $annotations := omit ($crd.metadata.annotations | default dict) "helm.sh/resource-policy" }}
{{- if $keep }}
{{- $_ := set $annotations "helm.sh/resource-policy" "keep" }}
{{- end }}
{{- $_ := set $crd.metadata "annotations" $annotations }}
{{- $_ := set $crd.metadata "labels" (merge (deepCopy $labels) ($crd.metadata.labels | default dict)) }}
---
{{ toYaml $crd }}
{{- end }}
{{- end }}
{{- end -}}
