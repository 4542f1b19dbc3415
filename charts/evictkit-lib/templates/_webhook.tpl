{{/*
Webhook serving certificate and the Service in front of the webhook port.

Values (.Values.webhook):
  enabled: false                  the component serves admission webhooks on 8443
  certificate:
    existingSecret: ""            a kubernetes.io/tls Secret (tls.crt, tls.key, ca.crt) managed
                                  elsewhere (e.g. cert-manager); nothing is generated
    caBundle: ""                  base64 PEM CA for the webhook configuration when existingSecret
                                  is set; defaults to the Secret's ca.crt when it can be looked up
    validityDays: 3650            lifetime of the generated CA and certificate

Without existingSecret a CA and a serving certificate for
<service>.<namespace>.svc are generated with genCA/genSignedCert once per render, and
reused from the cluster on upgrade (lookup) so that upgrades do not rotate them. The Secret
and every caBundle of one render come from the same CA.
*/}}

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
{{- $ca := genCA (printf "%s-ca" $svc) $days -}}
{{- $cert := genSignedCert (printf "%s.%s.svc" $svc $ns) nil $dnsNames $days $ca -}}
{{- $_ := set .Values "__evictkitWebhookCert" (dict "ca" ($ca.Cert | b64enc) "crt" ($cert.Cert | b64enc) "key" ($cert.Key | b64enc)) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The base64 PEM CA bundle for a webhook configuration's clientConfig.caBundle. */}}
{{- define "evictkit.webhookCABundle" -}}
{{- include "evictkit.webhookCert.ensure" . -}}
{{- (index .Values "__evictkitWebhookCert").ca -}}
{{- end -}}

{{/* The serving certificate Secret, unless .Values.webhook.certificate.existingSecret is set. */}}
{{- define "evictkit.webhookCertSecret" -}}
{{- $webhook := .Values.webhook | default dict -}}
{{- $certificate := $webhook.certificate | default dict -}}
{{- if not $certificate.existingSecret }}
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

{{/* The Service in front of the webhook port (443 -> 8443). */}}
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
