{{/* The chart's name, cut to the 63 characters a label value may hold. */}}
{{- define "deltapilot.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release-qualified name every object is named after. */}}
{{- define "deltapilot.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "deltapilot.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "deltapilot.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Selects the xDS-serving replicas (not the separate adapter). */}}
{{- define "deltapilot.serverSelector" -}}
app.kubernetes.io/name: {{ include "deltapilot.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: server
{{- end -}}

{{/* Selects the separate Kubernetes adapter (kafka mode). */}}
{{- define "deltapilot.adapterSelector" -}}
app.kubernetes.io/name: {{ include "deltapilot.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: adapter
{{- end -}}

{{- define "deltapilot.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The kafka:// log URI (kafka mode). */}}
{{- define "deltapilot.kafkaUri" -}}
{{- $k := .Values.log.kafka -}}
{{- if not $k.brokers -}}
{{- fail "log.kafka.brokers: at least one HOST:PORT is required when log.mode is kafka" -}}
{{- end -}}
{{- range $key := keys $k.options -}}
{{- if regexMatch "(\\.password|\\.secret|\\.passphrase|^ssl\\.key\\.pem|^sasl\\.oauthbearer\\.config)$" $key -}}
{{- fail (printf "log.kafka.options.%s: a secret in the kafka:// URI is refused (it shows in the pod spec); put it in log.kafka.secretName and give %s.file: %s/FILE" $key $key (include "deltapilot.kafkaSecretDir" $)) -}}
{{- end -}}
{{- end -}}
kafka://{{ join "," $k.brokers }}/{{ $k.topic }}{{ include "deltapilot.query" $k.options }}
{{- end -}}

{{/* The query string of `options` (a map), sorted: "?k=v&k=v" or "". YAML
numbers arrive as floats; whole ones are printed as integers (not 1.6e+07). */}}
{{- define "deltapilot.query" -}}
{{- $q := list -}}
{{- range $key := keys . | sortAlpha -}}
{{- $v := get $ $key -}}
{{- if kindIs "float64" $v }}{{ $v = int64 $v }}{{ end -}}
{{- $q = append $q (printf "%s=%v" $key $v) -}}
{{- end -}}
{{- if $q }}?{{ join "&" $q }}{{ end -}}
{{- end -}}

{{/* Where the in-process adapter's kubeconfig is mounted (embedded mode). */}}
{{- define "deltapilot.kubeconfigPath" -}}
/etc/deltapilot/kubeconfig/config
{{- end -}}

{{/* The pod security context of every pod: the image's non-root user. */}}
{{- define "deltapilot.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "deltapilot.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/* The server container (StatefulSet or Deployment). */}}
{{- define "deltapilot.serverContainer" -}}
- name: deltapilot
  image: {{ include "deltapilot.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  args: ["run"]
  env:
    - name: DELTAPILOT_XDS_ADDR
      value: "0.0.0.0:{{ .Values.xds.port }}"
    - name: DELTAPILOT_ADMIN_ADDR
      value: "0.0.0.0:{{ .Values.admin.port }}"
    - name: DELTAPILOT_DATA_DIR
      value: /var/lib/deltapilot
    - name: DELTAPILOT_DRAIN_GRACE_SECS
      value: {{ .Values.drainGraceSecs | quote }}
    {{- if eq .Values.log.mode "kafka" }}
    - name: DELTAPILOT_LOG
      value: {{ include "deltapilot.kafkaUri" . | quote }}
    {{- else if .Values.log.embedded.options }}
    - name: DELTAPILOT_LOG
      value: {{ printf "file:///var/lib/deltapilot/log%s" (include "deltapilot.query" .Values.log.embedded.options) | quote }}
    {{- end }}
    {{- if and (ne .Values.log.mode "kafka") .Values.kubernetes.enabled }}
    - name: DELTAPILOT_KUBECONFIG
      value: {{ include "deltapilot.kubeconfigPath" . }}
    {{- end }}
    {{- if gt (int .Values.xds.maxConnectionAgeSecs) 0 }}
    - name: DELTAPILOT_XDS_MAX_CONNECTION_AGE_SECS
      value: {{ .Values.xds.maxConnectionAgeSecs | quote }}
    {{- if not (kindIs "invalid" .Values.xds.maxConnectionAgeGraceSecs) }}
    - name: DELTAPILOT_XDS_MAX_CONNECTION_AGE_GRACE_SECS
      value: {{ .Values.xds.maxConnectionAgeGraceSecs | quote }}
    {{- end }}
    {{- else if not (kindIs "invalid" .Values.xds.maxConnectionAgeGraceSecs) }}
    {{- fail "xds.maxConnectionAgeGraceSecs needs xds.maxConnectionAgeSecs (the grace follows the GOAWAY a maximum age sends)" }}
    {{- end }}
    {{- with .Values.xds.tls }}
    {{- if .secretName }}
    - name: DELTAPILOT_XDS_TLS_CERT
      value: {{ include "deltapilot.xdsTlsDir" $ }}/tls.crt
    - name: DELTAPILOT_XDS_TLS_KEY
      value: {{ include "deltapilot.xdsTlsDir" $ }}/tls.key
    {{- if .mutual }}
    - name: DELTAPILOT_XDS_TLS_CLIENT_CA
      value: {{ include "deltapilot.xdsTlsDir" $ }}/ca.crt
    {{- end }}
    {{- if .allow }}
    {{- if not .mutual }}
    {{- fail "xds.tls.allow needs xds.tls.mutual: true (client identities come from client certificates)" }}
    {{- end }}
    - name: DELTAPILOT_XDS_TLS_ALLOW
      value: {{ join "," .allow | quote }}
    {{- end }}
    {{- else if or .mutual .allow }}
    {{- fail "xds.tls.mutual and xds.tls.allow need xds.tls.secretName (the server's certificate)" }}
    {{- end }}
    {{- end }}
    {{- if .Values.admin.tokenSecret }}
    - name: DELTAPILOT_ADMIN_TOKEN_FILE
      value: {{ include "deltapilot.adminTokenDir" . }}/token
    {{- end }}
    {{- range $name := keys .Values.extraEnv | sortAlpha }}
    - name: {{ $name }}
      value: {{ get $.Values.extraEnv $name | toString | quote }}
    {{- end }}
  ports:
    - name: xds
      containerPort: {{ .Values.xds.port }}
      protocol: TCP
    - name: admin
      containerPort: {{ .Values.admin.port }}
      protocol: TCP
  startupProbe:
    httpGet:
      path: /healthz
      port: admin
    periodSeconds: 2
    failureThreshold: 60
  livenessProbe:
    httpGet:
      path: /healthz
      port: admin
    periodSeconds: 10
    failureThreshold: 3
  readinessProbe:
    httpGet:
      path: /readyz
      port: admin
    periodSeconds: 5
    failureThreshold: 2
  resources:
    {{- toYaml .Values.resources | nindent 4 }}
  securityContext:
    {{- include "deltapilot.containerSecurityContext" . | nindent 4 }}
  volumeMounts:
    - name: data
      mountPath: /var/lib/deltapilot
    {{- if and (ne .Values.log.mode "kafka") .Values.kubernetes.enabled }}
    - name: kubeconfig
      mountPath: /etc/deltapilot/kubeconfig
      readOnly: true
    {{- end }}
    {{- if .Values.xds.tls.secretName }}
    - name: xds-tls
      mountPath: {{ include "deltapilot.xdsTlsDir" . }}
      readOnly: true
    {{- end }}
    {{- if .Values.admin.tokenSecret }}
    - name: admin-token
      mountPath: {{ include "deltapilot.adminTokenDir" . }}
      readOnly: true
    {{- end }}
    {{- with include "deltapilot.kafkaSecretMount" . }}
    {{- . | nindent 4 }}
    {{- end }}
{{- end -}}

{{/* Where log.kafka.secretName is mounted (a directory, as above), in the
replicas and the adapter. */}}
{{- define "deltapilot.kafkaSecretDir" -}}
/etc/deltapilot/kafka
{{- end -}}

{{/* The volumeMount of log.kafka.secretName (kafka mode), or nothing. */}}
{{- define "deltapilot.kafkaSecretMount" -}}
{{- if and (eq .Values.log.mode "kafka") .Values.log.kafka.secretName -}}
- name: kafka-secret
  mountPath: {{ include "deltapilot.kafkaSecretDir" . }}
  readOnly: true
{{- end -}}
{{- end -}}

{{/* The volume of log.kafka.secretName (kafka mode), or nothing. */}}
{{- define "deltapilot.kafkaSecretVolume" -}}
{{- if and .Values.log.kafka.secretName (ne .Values.log.mode "kafka") -}}
{{- fail "log.kafka.secretName applies only to log.mode=kafka (the embedded log has no Kafka client)" -}}
{{- end -}}
{{- if and (eq .Values.log.mode "kafka") .Values.log.kafka.secretName -}}
- name: kafka-secret
  secret:
    secretName: {{ .Values.log.kafka.secretName }}
{{- end -}}
{{- end -}}

{{/* Where the xDS TLS Secret is mounted: a directory, not subPath files, so
that the kubelet's ..data swap reaches the files deltapilot polls. */}}
{{- define "deltapilot.xdsTlsDir" -}}
/etc/deltapilot/xds-tls
{{- end -}}

{{/* Where the admin token Secret is mounted (a directory, as above). */}}
{{- define "deltapilot.adminTokenDir" -}}
/etc/deltapilot/admin-token
{{- end -}}

{{/* The server pod's volumes besides its data: the in-process adapter's
kubeconfig, the xDS TLS Secret, the admin token Secret, the Kafka Secret. */}}
{{- define "deltapilot.serverVolumes" -}}
{{- if and (ne .Values.log.mode "kafka") .Values.kubernetes.enabled }}
- name: kubeconfig
  configMap:
    name: {{ include "deltapilot.fullname" . }}-kubeconfig
{{- end }}
{{- if .Values.xds.tls.secretName }}
- name: xds-tls
  secret:
    secretName: {{ .Values.xds.tls.secretName }}
{{- end }}
{{- if .Values.admin.tokenSecret }}
- name: admin-token
  secret:
    secretName: {{ .Values.admin.tokenSecret }}
    items:
      - key: {{ .Values.admin.tokenKey }}
        path: token
{{- end }}
{{- with include "deltapilot.kafkaSecretVolume" . }}
{{ . }}
{{- end }}
{{- end -}}

{{/* Pod-level settings shared by every pod. */}}
{{- define "deltapilot.podCommon" -}}
serviceAccountName: {{ include "deltapilot.fullname" . }}
terminationGracePeriodSeconds: {{ add .Values.drainGraceSecs 5 }}
securityContext:
  {{- include "deltapilot.podSecurityContext" . | nindent 2 }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{- define "deltapilot.podAnnotations" -}}
{{- include "deltapilot.scrapeAnnotations" (dict "port" .Values.admin.port "extra" .Values.podAnnotations) }}
{{- end -}}

{{/* The separate adapter's pod annotations: scraped the same way, on its own
admin port. */}}
{{- define "deltapilot.adapterPodAnnotations" -}}
{{- include "deltapilot.scrapeAnnotations" (dict "port" .Values.admin.adapterPort "extra" .Values.podAnnotations) }}
{{- end -}}

{{/* prometheus.io/* on `port`, plus the `extra` annotations. */}}
{{- define "deltapilot.scrapeAnnotations" -}}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .port | quote }}
prometheus.io/path: /metrics
{{- with .extra }}
{{ toYaml . }}
{{- end }}
{{- end -}}
