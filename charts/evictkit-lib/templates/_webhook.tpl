{{/*
Webhook serving certificate and the Service in front of the webhook port.

Values (.Values.webhook):
  enabled: false                  the component serves admission webhooks
  port: 8443                      on this container port (with hostNetwork, a port of the node)
  certificate:
    existingSecret: ""            a kubernetes.io/tls Secret (tls.crt, tls.key, ca.crt) managed
                                  elsewhere (e.g. cert-manager); nothing is generated
    caBundle: ""                  base64 PEM CA for the webhook configuration when existingSecret
                                  is set; defaults to the Secret's ca.crt when it can be looked up
    validityDays: 3650            lifetime of the generated CA and certificate
    certManager:
      enabled: false              cert-manager issues the serving certificate (a Certificate
                                  into the same Secret) and its cainjector fills every
                                  caBundle (annotation cert-manager.io/inject-ca-from)
      issuerRef: {}               {name, kind, group} of an Issuer/ClusterIssuer; empty: the
                                  chart creates a self-signed Issuer for the certificate

Modes, in order: certManager.enabled; existingSecret (with caBundle it needs no cluster access
at render time, for GitOps tools that render without one); else generated.
Without existingSecret a CA and a serving certificate for
<service>.<namespace>.svc are generated once per render, and reused from the cluster on
upgrade (lookup) so that upgrades do not rotate them. The Secret and every caBundle of one
render come from the same CA. Keys are ECDSA P-256 (genPrivateKey "ecdsa"), here and in
cert-manager mode: the apiserver calls a Service's webhook over HTTP/1.1, a connection per
concurrent call, so a burst is a burst of TLS handshakes, and a P-256 signature costs the
webhook a fraction of an RSA-2048 one (helm's genCA and cert-manager default to RSA-2048).
*/}}

{{/* The container port the webhooks are served on (.Values.webhook.port, default 8443). */}}
{{- define "evictkit.webhookPort" -}}
{{- $webhook := .Values.webhook | default dict -}}
{{- $webhook.port | default 8443 | int -}}
{{- end -}}

{{/* The objectSelector of a webhook on objects evictkit's charts create themselves (pods,
PodDisruptionBudgets): it never reviews evictkit's own, which carry app.kubernetes.io/part-of:
evictkit (evictkit.labels). Otherwise `helm install` registers the webhook before its pods are
Ready, and the install's own pod and PDB creations call a webhook with no endpoints and wait
out its timeout ("no route to host") before failing open, as cert-manager excludes its own
namespace. User objects do not carry that label and are reviewed as before. */}}
{{- define "evictkit.webhookObjectSelector" -}}
matchExpressions:
  - key: app.kubernetes.io/part-of
    operator: NotIn
    values: [evictkit]
{{- end -}}

{{/* Name of the Service the webhook configuration points at. */}}
{{- define "evictkit.webhookServiceName" -}}
{{- printf "%s-webhook" (include "evictkit.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Name of the Secret holding the serving certificate. */}}
{{- define "evictkit.webhookCertSecretName" -}}
{{- $webhook := .Values.webhook | default dict -}}
{{- $certificate := $webhook.certificate | default dict -}}
{{- $certificate.existingSecret | default (printf "%s-webhook-tls" (include "evictkit.fullname" .) | trunc 63 | trimSuffix "-") -}}
{{- end -}}

{{/* cert-manager mode is on. */}}
{{- define "evictkit.webhookCertManager" -}}
{{- $webhook := .Values.webhook | default dict -}}
{{- $certificate := $webhook.certificate | default dict -}}
{{- $certManager := $certificate.certManager | default dict -}}
{{- if $certManager.enabled -}}true{{- end -}}
{{- end -}}

{{/* Name of the cert-manager Certificate (and of its self-signed Issuer). */}}
{{- define "evictkit.webhookCertificateName" -}}
{{- printf "%s-webhook" (include "evictkit.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* A webhook configuration's metadata.annotations: cert-manager's CA injection, or nothing. */}}
{{- define "evictkit.webhookConfigAnnotations" -}}
{{- if include "evictkit.webhookCertManager" . -}}
annotations:
  cert-manager.io/inject-ca-from: {{ printf "%s/%s" .Release.Namespace (include "evictkit.webhookCertificateName" .) }}
{{- end -}}
{{- end -}}

{{/* A clientConfig's caBundle line; none in cert-manager mode (the cainjector writes it and
Helm's three-way merge leaves a field the chart never sets alone). */}}
{{- define "evictkit.webhookClientCABundle" -}}
{{- if not (include "evictkit.webhookCertManager" .) -}}
caBundle: {{ include "evictkit.webhookCABundle" . }}
{{- end -}}
{{- end -}}

{{/* cert-manager mode: the Certificate for the webhook Service (into the serving Secret) and,
without an issuerRef, a self-signed Issuer for it. */}}
{{- define "evictkit.webhookCertManagerObjects" -}}
{{- if include "evictkit.webhookCertManager" . }}
{{- $certManager := .Values.webhook.certificate.certManager -}}
{{- $name := include "evictkit.webhookCertificateName" . -}}
{{- $svc := include "evictkit.webhookServiceName" . -}}
{{- $ns := .Release.Namespace -}}
{{- if not $certManager.issuerRef }}
apiVersion: cert-manager.io/v1
kind: Issuer
metadata:
  name: {{ $name }}
  namespace: {{ $ns }}
  labels:
    {{- include "evictkit.labels" . | nindent 4 }}
spec:
  selfSigned: {}
---
{{- end }}
apiVersion: cert-manager.io/v1
kind: Certificate
metadata:
  name: {{ $name }}
  namespace: {{ $ns }}
  labels:
    {{- include "evictkit.labels" . | nindent 4 }}
spec:
  secretName: {{ include "evictkit.webhookCertSecretName" . }}
  privateKey:
    algorithm: ECDSA
    size: 256
  duration: {{ printf "%dh" (mul 24 (int (.Values.webhook.certificate.validityDays | default 3650))) }}
  commonName: {{ printf "%s.%s.svc" $svc $ns }}
  dnsNames:
    - {{ $svc }}
    - {{ printf "%s.%s" $svc $ns }}
    - {{ printf "%s.%s.svc" $svc $ns }}
    - {{ printf "%s.%s.svc.cluster.local" $svc $ns }}
  issuerRef:
    {{- toYaml ($certManager.issuerRef | default (dict "name" $name "kind" "Issuer" "group" "cert-manager.io")) | nindent 4 }}
{{- end }}
{{- end -}}

{{/* Internal: compute the certificate once per render and keep it in .Values. */}}
{{- define "evictkit.webhookCert.ensure" -}}
{{- if not (hasKey .Values "__evictkitWebhookCert") -}}
{{- $webhook := .Values.webhook | default dict -}}
{{- $certificate := $webhook.certificate | default dict -}}
{{- $secretName := include "evictkit.webhookCertSecretName" . -}}
{{- $existing := lookup "v1" "Secret" .Release.Namespace $secretName -}}
{{- $data := dict -}}
{{- if and $existing $existing.data -}}
{{- $data = $existing.data -}}
{{- end -}}
{{- if $certificate.existingSecret -}}
{{- $ca := $certificate.caBundle | default (index $data "ca.crt") | default "" -}}
{{- $_ := set .Values "__evictkitWebhookCert" (dict "ca" $ca) -}}
{{- else if and (index $data "tls.crt") (index $data "tls.key") (index $data "ca.crt") -}}
{{- $_ := set .Values "__evictkitWebhookCert" (dict "ca" (index $data "ca.crt") "crt" (index $data "tls.crt") "key" (index $data "tls.key")) -}}
{{- else -}}
{{- $days := int ($certificate.validityDays | default 3650) -}}
{{- $svc := include "evictkit.webhookServiceName" . -}}
{{- $ns := .Release.Namespace -}}
{{- $dnsNames := list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns) -}}
{{- $ca := genCAWithKey (printf "%s-ca" $svc) $days (genPrivateKey "ecdsa") -}}
{{- $cert := genSignedCertWithKey (printf "%s.%s.svc" $svc $ns) nil $dnsNames $days $ca (genPrivateKey "ecdsa") -}}
{{- $_ := set .Values "__evictkitWebhookCert" (dict "ca" ($ca.Cert | b64enc) "crt" ($cert.Cert | b64enc) "key" ($cert.Key | b64enc)) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The base64 PEM CA bundle for a webhook configuration's clientConfig.caBundle. */}}
{{- define "evictkit.webhookCABundle" -}}
{{- include "evictkit.webhookCert.ensure" . -}}
{{- (index .Values "__evictkitWebhookCert").ca -}}
{{- end -}}

{{/* The serving certificate Secret, unless .Values.webhook.certificate.existingSecret is set;
in cert-manager mode the Certificate (and its Issuer) instead. */}}
{{- define "evictkit.webhookCertSecret" -}}
{{- $webhook := .Values.webhook | default dict -}}
{{- $certificate := $webhook.certificate | default dict -}}
{{- if include "evictkit.webhookCertManager" . }}
{{- include "evictkit.webhookCertManagerObjects" . }}
{{- else if not $certificate.existingSecret }}
{{- include "evictkit.webhookCert.ensure" . }}
{{- $cert := index .Values "__evictkitWebhookCert" }}
apiVersion: v1
kind: Secret
type: kubernetes.io/tls
metadata:
  name: {{ include "evictkit.webhookCertSecretName" . }}
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "evictkit.labels" . | nindent 4 }}
data:
  tls.crt: {{ $cert.crt }}
  tls.key: {{ $cert.key }}
  ca.crt: {{ $cert.ca }}
{{- end }}
{{- end -}}

{{/* The Service in front of the webhook port (443 -> the container's port named webhook). */}}
{{- define "evictkit.webhookService" -}}
apiVersion: v1
kind: Service
metadata:
  name: {{ include "evictkit.webhookServiceName" . }}
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "evictkit.labels" . | nindent 4 }}
spec:
  type: ClusterIP
  selector:
    {{- include "evictkit.selectorLabels" . | nindent 4 }}
  ports:
    - name: webhook
      port: 443
      targetPort: webhook
      protocol: TCP
{{- end -}}
