{{/*
The component's Deployment with the flags every evictkit binary shares (crates/runtime
CommonArgs): --metrics-addr, --leader-elect, --log-format, and with webhooks --webhook-addr,
--tls-cert-file, --tls-key-file; RUST_LOG (the binaries' log filter) from logLevel; probes on
/healthz and /readyz of the metrics port; a non-root, read-only container.

The one way a chart adds its component's flags: a list built from its own values, passed
beside the root context,
  {{ include "evictkit.deployment" (dict "context" . "flags" $flags) }}
They go after the common flags and before the user's `args`; a chart flag whose name also
appears in `args` is left out, so `args` overrides any of them (the binaries refuse a flag
given twice).

Values:
  replicas: 1
  image: {registry, repository (default <component>), tag (default appVersion), digest, pullPolicy}
  imagePullSecrets: []            after global.imagePullSecrets
  args: []                        extra flags, after the chart's own
  env: []
  leaderElection: {enabled: true} false only with exactly one replica
  logFormat: json                 text | json
  logLevel: info                  RUST_LOG, unless env names RUST_LOG itself
  webhook: {enabled: false, port: 8443, ...}  see _webhook.tpl; mounts the certificate at
                                  /etc/evictkit/tls
  metrics: {port: 8080}           see _metrics.tpl
  hostNetwork: false              with dnsPolicy ClusterFirstWithHostNet, so the pods still
                                  resolve Services
  resources: {}
  podAnnotations: {}
  podLabels: {}
  podSecurityContext: {}          merged over runAsNonRoot/seccompProfile defaults
  securityContext: {}             merged over the container defaults below
  nodeSelector: {}                merged over global.nodeSelector
  tolerations: []                 after global.tolerations
  affinity: {}
  priorityClassName: ""           default global.priorityClassName
  topologySpreadConstraints: []   an entry without labelSelector selects the component's pods
  shutdownDelaySeconds: 5         a stopping pod keeps serving this long (preStop sleep) while
                                  its endpoint leaves every kube-proxy, so no webhook call
                                  meets a closed port during a rollout; 0: none
*/}}
{{- define "evictkit.deployment" -}}
{{- $flags := .flags | default list -}}
{{- $root := .context -}}
{{- with $root -}}
{{- $args := .Values.args | default list -}}
{{- $overridden := list -}}
{{- range $args }}{{ $overridden = append $overridden (regexReplaceAll "=.*" (toString .) "") }}{{ end -}}
{{- $own := list -}}
{{- range $flags }}{{ if not (has (regexReplaceAll "=.*" . "") $overridden) }}{{ $own = append $own . }}{{ end }}{{ end -}}
{{- $webhook := .Values.webhook | default dict -}}
{{- $leaderElection := .Values.leaderElection | default dict -}}
{{- $image := .Values.image | default dict -}}
{{- $global := .Values.global | default dict -}}
{{- $pullSecrets := concat ($global.imagePullSecrets | default list) (.Values.imagePullSecrets | default list) | uniq -}}
{{- $nodeSelector := merge (deepCopy (.Values.nodeSelector | default dict)) ($global.nodeSelector | default dict) -}}
{{- $tolerations := concat ($global.tolerations | default list) (.Values.tolerations | default list) -}}
{{- $priorityClassName := .Values.priorityClassName | default $global.priorityClassName -}}
{{- $env := .Values.env | default list -}}
{{- $ownLogLevel := true -}}
{{- range $env }}{{ if eq .name "RUST_LOG" }}{{ $ownLogLevel = false }}{{ end }}{{ end -}}
{{- if $ownLogLevel }}{{ $env = prepend $env (dict "name" "RUST_LOG" "value" (.Values.logLevel | default "info" | toString)) }}{{ end -}}
{{- $shutdownDelay := int (ternary .Values.shutdownDelaySeconds 5 (hasKey .Values "shutdownDelaySeconds")) -}}
{{- $podSecurityContext := merge (deepCopy (.Values.podSecurityContext | default dict)) (dict "runAsNonRoot" true "runAsUser" 65532 "runAsGroup" 65532 "seccompProfile" (dict "type" "RuntimeDefault")) -}}
{{- $securityContext := merge (deepCopy (.Values.securityContext | default dict)) (dict "runAsNonRoot" true "readOnlyRootFilesystem" true "allowPrivilegeEscalation" false "capabilities" (dict "drop" (list "ALL"))) -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "evictkit.fullname" . }}
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "evictkit.labels" . | nindent 4 }}
spec:
  replicas: {{ .Values.replicas | default 1 }}
  selector:
    matchLabels:
      {{- include "evictkit.selectorLabels" . | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "evictkit.labels" . | nindent 8 }}
        {{- with .Values.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- with .Values.podAnnotations }}
      annotations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
    spec:
      serviceAccountName: {{ include "evictkit.serviceAccountName" . }}
      {{- if .Values.hostNetwork }}
      hostNetwork: true
      dnsPolicy: ClusterFirstWithHostNet
      {{- end }}
      {{- with $pullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $priorityClassName }}
      priorityClassName: {{ . }}
      {{- end }}
      securityContext:
        {{- toYaml $podSecurityContext | nindent 8 }}
      containers:
        - name: {{ include "evictkit.component" . }}
          image: {{ include "evictkit.image" . | quote }}
          imagePullPolicy: {{ $image.pullPolicy | default "IfNotPresent" }}
          args:
            - --metrics-addr=0.0.0.0:{{ include "evictkit.metricsPort" . }}
            - --leader-elect={{ not (and (hasKey $leaderElection "enabled") (not $leaderElection.enabled)) }}
            - --log-format={{ .Values.logFormat | default "json" }}
            {{- if $webhook.enabled }}
            - --webhook-addr=0.0.0.0:{{ include "evictkit.webhookPort" . }}
            - --tls-cert-file=/etc/evictkit/tls/tls.crt
            - --tls-key-file=/etc/evictkit/tls/tls.key
            {{- end }}
            {{- range (concat $own $args) }}
            - {{ . | quote }}
            {{- end }}
          {{- with $env }}
          env:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          ports:
            - name: metrics
              containerPort: {{ include "evictkit.metricsPort" . }}
              protocol: TCP
            {{- if $webhook.enabled }}
            - name: webhook
              containerPort: {{ include "evictkit.webhookPort" . }}
              protocol: TCP
            {{- end }}
          livenessProbe:
            httpGet:
              path: /healthz
              port: metrics
            initialDelaySeconds: 5
            periodSeconds: 10
          readinessProbe:
            httpGet:
              path: /readyz
              port: metrics
            periodSeconds: 5
          {{- if gt $shutdownDelay 0 }}
          lifecycle:
            preStop:
              sleep:
                seconds: {{ $shutdownDelay }}
          {{- end }}
          resources:
            {{- toYaml (.Values.resources | default (dict "requests" (dict "cpu" "10m" "memory" "32Mi"))) | nindent 12 }}
          securityContext:
            {{- toYaml $securityContext | nindent 12 }}
          {{- if $webhook.enabled }}
          volumeMounts:
            - name: webhook-tls
              mountPath: /etc/evictkit/tls
              readOnly: true
          {{- end }}
      {{- if $webhook.enabled }}
      volumes:
        - name: webhook-tls
          secret:
            secretName: {{ include "evictkit.webhookCertSecretName" . }}
      {{- end }}
      {{- with $nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .Values.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .Values.topologySpreadConstraints }}
      topologySpreadConstraints:
        {{- $selector := dict "matchLabels" (include "evictkit.selectorLabels" $root | fromYaml) }}
        {{- range . }}
        - {{ toYaml (merge (deepCopy .) (dict "labelSelector" $selector)) | indent 10 | trim }}
        {{- end }}
      {{- end }}
{{- end -}}
{{- end -}}
