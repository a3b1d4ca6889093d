{{/* Chart name. */}}
{{- define "apns-relay.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: RELEASE-apns-relay, or RELEASE when it already contains the chart name. */}}
{{- define "apns-relay.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "apns-relay.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "apns-relay.selectorLabels" -}}
app.kubernetes.io/name: {{ include "apns-relay.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "apns-relay.labels" -}}
helm.sh/chart: {{ include "apns-relay.chart" . }}
{{ include "apns-relay.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: relay
{{- end }}

{{- define "apns-relay.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "apns-relay.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "apns-relay.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{/* Where files live inside the pod. */}}
{{- define "apns-relay.configPath" -}}/etc/apns-relay/relay.yaml{{- end }}
{{- define "apns-relay.apnsSecretDir" -}}/etc/apns-relay/secrets/apns{{- end }}
{{/* apnsApps: app N's Secret is mounted at DIR/N. */}}
{{- define "apns-relay.appsSecretDir" -}}/etc/apns-relay/secrets/apps{{- end }}
{{- define "apns-relay.proxySecretDir" -}}/etc/apns-relay/secrets/proxy{{- end }}

{{/* Secret names. */}}
{{- define "apns-relay.apnsSecretName" -}}
{{- .Values.apnsCredentials.existingSecret | default (printf "%s-apns" (include "apns-relay.fullname" .)) }}
{{- end }}
{{- define "apns-relay.kafkaSecretName" -}}
{{- .Values.kafkaSasl.existingSecret | default (printf "%s-kafka" (include "apns-relay.fullname" .)) }}
{{- end }}

{{/* The relay's graceful stop budget, seconds. */}}
{{- define "apns-relay.shutdownTimeout" -}}
{{- $relay := .Values.config.relay | default dict }}
{{- $relay.shutdown_timeout_s | default 25 | int }}
{{- end }}

{{/* The http port (relay.http_port). */}}
{{- define "apns-relay.httpPort" -}}
{{- $relay := .Values.config.relay | default dict }}
{{- $relay.http_port | default 9090 | int }}
{{- end }}

{{/*
terminationGracePeriodSeconds: shutdown_timeout_s + 15 unless set (a send on the wire at the
budget's end may wait 10 s for its answer, then GOAWAY); rendering fails
when the configured value would not leave the relay its full shutdown budget.
*/}}
{{- define "apns-relay.terminationGracePeriodSeconds" -}}
{{- $timeout := include "apns-relay.shutdownTimeout" . | int }}
{{- if kindIs "invalid" .Values.terminationGracePeriodSeconds }}
{{- add $timeout 15 }}
{{- else }}
{{- $grace := .Values.terminationGracePeriodSeconds | int }}
{{- if le $grace $timeout }}
{{- fail (printf "terminationGracePeriodSeconds (%d) must be greater than config.relay.shutdown_timeout_s (%d): Kubernetes would kill the relay before it has drained" $grace $timeout) }}
{{- end }}
{{- $grace }}
{{- end }}
{{- end }}

{{/*
The effective relay.yaml: .Values.config plus the credential file paths and the SASL
settings the chart manages. Secrets never go into it.
*/}}
{{- define "apns-relay.config" -}}
{{- $cfg := deepCopy (.Values.config | default dict) }}
{{- $kafka := get $cfg "kafka" | default dict }}
{{- if not $kafka.brokers }}
{{- fail "config.kafka.brokers is required (bootstrap servers, host:port[,host:port])" }}
{{- end }}
{{- $apns := get $cfg "apns" | default dict }}
{{- $auth := get $apns "auth" | default dict }}
{{- if or (hasKey $auth "p12_password") (hasKey $auth "password") }}
{{- fail "config.apns.auth.p12_password must not be set in config (it would land in a ConfigMap): use apnsCredentials.p12Password or apnsCredentials.existingSecret" }}
{{- end }}
{{- if hasKey $apns "proxy_credentials" }}
{{- fail "config.apns.proxy_credentials must not be set in config (it would land in a ConfigMap): use apnsProxyCredentials.existingSecret" }}
{{- end }}
{{- if contains "@" ($apns.proxy | default "" | toString) }}
{{- fail "config.apns.proxy must not hold credentials (user:password@): use apnsProxyCredentials.existingSecret" }}
{{- end }}
{{- $proxyCredentials := .Values.apnsProxyCredentials }}
{{- if $proxyCredentials.existingSecret }}
{{- if not $apns.proxy }}
{{- fail "apnsProxyCredentials.existingSecret is set but config.apns.proxy is empty" }}
{{- end }}
{{- if eq $proxyCredentials.mountAs "file" }}
{{- $_ := set $apns "proxy_credentials_file" (printf "%s/%s" (include "apns-relay.proxySecretDir" .) $proxyCredentials.key) }}
{{- end }}
{{- end }}
{{- $dir := include "apns-relay.apnsSecretDir" . }}
{{- $keys := .Values.apnsCredentials.secretKeys }}
{{- $type := .Values.apnsCredentials.type }}
{{- if eq $type "token" }}
{{- $_ := set $auth "key_file" (printf "%s/%s" $dir $keys.p8) }}
{{- if .Values.apnsCredentials.keyIdFromSecret }}
{{- if get $auth "key_id" }}
{{- fail "apnsCredentials.keyIdFromSecret takes the key id from the Secret: leave config.apns.auth.key_id unset" }}
{{- end }}
{{- $_ := unset $auth "key_id" }}
{{- $_ := set $auth "key_id_file" (printf "%s/%s" $dir $keys.keyId) }}
{{- end }}
{{- else if eq $type "certificate" }}
{{- $_ := set $auth "cert_file" (printf "%s/%s" $dir $keys.cert) }}
{{- $_ := set $auth "private_key_file" (printf "%s/%s" $dir $keys.privateKey) }}
{{- else if eq $type "pkcs12" }}
{{- $_ := set $auth "p12_file" (printf "%s/%s" $dir $keys.p12) }}
{{- else if ne $type "none" }}
{{- fail (printf "apnsCredentials.type must be token, certificate, pkcs12 or none, not %q" $type) }}
{{- end }}
{{- $_ := set $apns "auth" $auth }}
{{- if hasKey $apns "apps" }}
{{- fail "config.apns.apps is rendered from apnsApps (each app's files come from its Secret): set apnsApps instead" }}
{{- end }}
{{- if .Values.apnsApps }}
{{- if ne $type "none" }}
{{- fail "apnsApps and apnsCredentials are one or the other: with apnsApps, set apnsCredentials.type=none" }}
{{- end }}
{{- $apps := list }}
{{- range $index, $app := .Values.apnsApps }}
{{- $appDir := printf "%s/%d" (include "apns-relay.appsSecretDir" $) $index }}
{{- $entry := dict "topic" (required (printf "apnsApps[%d].topic (the bundle id) is required" $index) $app.topic) }}
{{- if eq $app.type "token" }}
{{- $_ := set $entry "key_file" (printf "%s/%s" $appDir $keys.p8) }}
{{- if $app.keyIdFromSecret }}
{{- $_ := set $entry "key_id_file" (printf "%s/%s" $appDir $keys.keyId) }}
{{- else }}
{{- $_ := set $entry "key_id" (required (printf "apnsApps[%d].keyId is required for token auth (or keyIdFromSecret)" $index) $app.keyId) }}
{{- end }}
{{- $_ := set $entry "team_id" (required (printf "apnsApps[%d].teamId is required for token auth" $index) $app.teamId) }}
{{- if $app.keyEnvironment }}
{{- $_ := set $entry "key_environment" $app.keyEnvironment }}
{{- end }}
{{- else if eq $app.type "certificate" }}
{{- $_ := set $entry "cert_file" (printf "%s/%s" $appDir $keys.cert) }}
{{- $_ := set $entry "private_key_file" (printf "%s/%s" $appDir $keys.privateKey) }}
{{- else if eq $app.type "pkcs12" }}
{{- $_ := set $entry "p12_file" (printf "%s/%s" $appDir $keys.p12) }}
{{- else }}
{{- fail (printf "apnsApps[%d].type must be token, certificate or pkcs12, not %q" $index $app.type) }}
{{- end }}
{{- $apps = append $apps $entry }}
{{- end }}
{{- $_ := set $apns "apps" $apps }}
{{- end }}
{{- $_ := set $cfg "apns" $apns }}
{{- if .Values.kafkaSasl.enabled }}
{{- $props := get $kafka "properties" | default dict }}
{{- $_ := set $props "security.protocol" .Values.kafkaSasl.securityProtocol }}
{{- $_ := set $props "sasl.mechanism" .Values.kafkaSasl.mechanism }}
{{- $_ := set $kafka "properties" $props }}
{{- end }}
{{- $_ := set $cfg "kafka" $kafka }}
{{- include "apns-relay.prune" $cfg | fromJson | toYaml }}
{{- end }}

{{/*
A map without its empty strings, nulls and empty maps (recursively), as JSON: a key
left empty in values takes the relay's built-in default instead of "".
*/}}
{{- define "apns-relay.prune" -}}
{{- $out := dict }}
{{- range $k, $v := . }}
{{- if kindIs "map" $v }}
{{- $p := include "apns-relay.prune" $v | fromJson }}
{{- if $p }}
{{- $_ := set $out $k $p }}
{{- end }}
{{- else if and (not (kindIs "invalid" $v)) (not (and (kindIs "string" $v) (eq $v ""))) }}
{{- $_ := set $out $k $v }}
{{- end }}
{{- end }}
{{- toJson $out }}
{{- end }}

{{/*
The relay's workload: a StatefulSet with static membership (stable pod names as kafka.group_instance_id), else a
Deployment.
*/}}
{{- define "apns-relay.workloadKind" -}}
{{- if .Values.staticMembership.enabled }}StatefulSet{{ else }}Deployment{{ end }}
{{- end }}
