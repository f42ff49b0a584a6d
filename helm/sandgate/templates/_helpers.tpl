{{/* Names, labels and the rendered sandgate config. */}}

{{- define "sandgate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "sandgate.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Selector labels: never change them between releases (a Deployment's selector is immutable). */}}
{{- define "sandgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sandgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/*
The pods of the hook Job, the helm test and the in-chart Redis: never sandgate's selector
labels, or the Service, the PDB and the topology spread would count them as sandgate replicas.
Argument: (list . "test").
*/}}
{{- define "sandgate.componentLabels" -}}
{{- $top := index . 0 -}}
app.kubernetes.io/name: {{ printf "%s-%s" (include "sandgate.name" $top) (index . 1) | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ $top.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "sandgate.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "sandgate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "sandgate.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The CA Secret's name, or "" when there is no CA. */}}
{{- define "sandgate.caSecret" -}}
{{- if .Values.ca.existingSecret -}}
{{- .Values.ca.existingSecret -}}
{{- else if .Values.ca.generate -}}
{{- printf "%s-ca" (include "sandgate.fullname" .) -}}
{{- end -}}
{{- end -}}

{{- define "sandgate.configDir" -}}/etc/sandgate/config{{- end -}}
{{- define "sandgate.caDir" -}}/etc/sandgate/ca{{- end -}}
{{- define "sandgate.credentialDir" -}}/var/run/secrets/sandgate{{- end -}}

{{/* The Redis password's Secret (state.redis.passwordSecret), and its credential's name. */}}
{{- define "sandgate.redisSecretDir" -}}{{ include "sandgate.credentialDir" . }}/{{ include "sandgate.redisCredential" . }}{{- end -}}
{{- define "sandgate.redisCredential" -}}sandgate-redis{{- end -}}

{{/*
The Redis sandgate counts in: the in-chart one's Service with state.redis.deploy.enabled (the
schema then refuses a url), else state.redis.url; "" for none. Every template asks this, never
the value itself, so the in-chart Redis gets the password, the mount and the policies too.
*/}}
{{- define "sandgate.redisURL" -}}
{{- if .Values.state.redis.deploy.enabled -}}
{{- printf "redis://%s-redis:6379/0" (include "sandgate.fullname" .) -}}
{{- else -}}
{{- .Values.state.redis.url -}}
{{- end -}}
{{- end -}}

{{/* The port of sandgate.redisURL (6379 when it names none), for the egress NetworkPolicy. */}}
{{- define "sandgate.redisPort" -}}
{{- $host := (urlParse (include "sandgate.redisURL" .)).host -}}
{{- $port := regexFind ":[0-9]+$" $host | trimPrefix ":" -}}
{{- default "6379" $port -}}
{{- end -}}

{{/* Where the Secrets of config.tokens.keys are mounted, one directory per Secret name. */}}
{{- define "sandgate.tokenKeyDir" -}}/var/run/secrets/sandgate-tokens{{- end -}}

{{/* The distinct Secret names of config.tokens.keys, sorted, as a JSON list. */}}
{{- define "sandgate.tokenSecrets" -}}
{{- $names := list -}}
{{- range (.Values.config.tokens | default dict).keys -}}
{{- $names = append $names .secret.name -}}
{{- end -}}
{{- $names | uniq | sortAlpha | toJson -}}
{{- end -}}

{{/*
The part of the config that sandgate reads only at start (listen, audit, the CA). The pod
template's checksum annotation covers exactly this, so editing it rolls the pods out and
nothing else does.
*/}}
{{- define "sandgate.restartConfig" -}}
listen:
  proxy: 0.0.0.0:{{ .Values.listen.proxyPort }}
  metrics: 0.0.0.0:{{ .Values.listen.metricsPort }}
{{- with .Values.audit.path }}
audit:
  path: {{ . | quote }}
{{- end }}
{{- with include "sandgate.caSecret" . }}
ca:
  cert: {{ include "sandgate.caDir" $ }}/ca.pem
  key: {{ include "sandgate.caDir" $ }}/ca.key
{{- end }}
{{- end -}}

{{/*
What the checksum annotation covers: the restart-only config and which CA it loads (the Secret
and its keys; the Secret's content is not visible to Helm, so a CA rotated in place needs
`kubectl rollout restart`).
*/}}
{{- define "sandgate.restartInputs" -}}
{{ include "sandgate.restartConfig" . }}
ca-secret: {{ include "sandgate.caSecret" . }}/{{ .Values.ca.certKey }}/{{ .Values.ca.keyKey }}
ca-certificate: {{ .Values.ca.certificate | sha256sum }}
{{- end -}}

{{/*
The hot-reloaded part: policies, tasks, credentials (each read from its mounted Secret),
state.redis (its password from its mounted Secret), LLM prices, global rules, limits and task
token keys (each read from its mounted Secret).
*/}}
{{- define "sandgate.reloadConfig" -}}
{{- $c := .Values.config -}}
{{- $redis := .Values.state.redis -}}
{{- $redisURL := include "sandgate.redisURL" . -}}
{{- $redisPassword := and $redisURL $redis.passwordSecret.name -}}
{{- if or $c.credentials $redisPassword }}
credentials:
{{- range $name, $cred := $c.credentials }}
  {{ $name | quote }}:
    source:
      file: {{ printf "%s/%s/%s" (include "sandgate.credentialDir" $) $name $cred.secret.key | quote }}
    {{- toYaml (omit $cred "secret") | nindent 4 }}
{{- end }}
{{- if $redisPassword }}
  # The Redis AUTH password (state.redis.passwordSecret): read by sandgate's secret store, sent
  # to no host.
  {{ include "sandgate.redisCredential" . | quote }}:
    source:
      file: {{ printf "%s/%s" (include "sandgate.redisSecretDir" .) $redis.passwordSecret.key | quote }}
{{- end }}
{{- end }}
{{- if $redisURL }}
state:
  redis:
    url: {{ $redisURL | quote }}
    {{- if $redisPassword }}
    password: {{ include "sandgate.redisCredential" . | quote }}
    {{- end }}
    fail: {{ $redis.fail | quote }}
    {{- with $redis.key_prefix }}
    key_prefix: {{ . | quote }}
    {{- end }}
{{- end }}
{{- with $c.llm }}
llm:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $c.policies }}
policies:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $c.tasks }}
tasks:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $c.global }}
global:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $c.limits }}
limits:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $c.resolve }}
resolve:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $c.tokens }}
tokens:
  keys:
  {{- range .keys }}
    - id: {{ .id | quote }}
      file: {{ printf "%s/%s/%s" (include "sandgate.tokenKeyDir" $) .secret.name .secret.key | quote }}
      {{- with (omit . "id" "secret") }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
  {{- end }}
  {{- with (omit . "keys") }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}
{{- end -}}

{{- define "sandgate.config" -}}
# Rendered by the sandgate chart from its values; sandgate reloads it when the kubelet swaps
# the ConfigMap (listen, audit and ca apply after a restart, which the chart rolls out).
{{ include "sandgate.restartConfig" . }}
{{- include "sandgate.reloadConfig" . }}
{{- end -}}
