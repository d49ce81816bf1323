{{/* Names, labels and the checks JSON schema cannot express. */}}

{{- define "colocate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Release name, with the chart name appended unless it already contains it. */}}
{{- define "colocate.fullname" -}}
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

{{- define "colocate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "colocate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "colocate.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "colocate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "colocate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "colocate.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name: name the existing ServiceAccount to run as when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "colocate.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{/*
The leader Lease (run.lease_name), in the namespace of the pod (POD_NAMESPACE). One Lease per
release: two releases in one namespace elect their leaders apart. The Role grants get/update on
this name only.
*/}}
{{- define "colocate.leaseName" -}}{{ include "colocate.fullname" . }}{{- end }}

{{- define "colocate.configDir" -}}/etc/colocate{{- end }}
{{- define "colocate.tokenDir" -}}/var/run/secrets/colocate{{- end }}

{{/* Whether an optional monitoring object is rendered: true, false, or auto (its CRD is served). */}}
{{- define "colocate.monitoringEnabled" -}}
{{- $setting := index . 0 }}{{- $root := index . 1 }}{{- $kind := index . 2 }}
{{- if eq (toString $setting) "auto" }}
{{- if $root.Capabilities.APIVersions.Has (printf "monitoring.coreos.com/v1/%s" $kind) }}true{{ end }}
{{- else if eq (toString $setting) "true" }}true
{{- end }}
{{- end }}

{{/*
Ranges of the controller's numeric settings, as `colocate check-config` checks them
(src/core/config.rs). values.schema.json checks numbers given in values files; `--set` passes
1.5 as the string "1.5", which the schema lets through and these checks catch.
*/}}
{{- define "colocate.numericSettings" -}}
target_utilization: [0, 1]
safety_margin: [0, 0.9]
reserve_tolerance: [0, 1]
reserve_quantum: [0, 1]
grow_min_gain: [0, 10]
latency_slack_hold: [-1, 1]
latency_slack_shrink: [-1, 1]
latency_shrink_fraction: [0, 1]
grow_max_step: [1, 4294967295]
latency_guard_max_steps: [0, 4294967295]
{{- end }}

{{/*
The controller: block of the config file: numbers given as strings (by --set) become numbers,
and every check of `colocate check-config` that values.schema.json cannot express fails here
with the same wording, so that a bad value fails at install rather than in a crash loop.
*/}}
{{- define "colocate.controllerConfig" -}}
{{- $out := dict }}
{{- $ranges := include "colocate.numericSettings" . | fromYaml }}
{{- range $key, $v := .Values.config.controller }}
{{- if hasKey $ranges $key }}
{{- $n := float64 $v }}
{{- $r := index $ranges $key }}
{{- if or (lt $n (float64 (index $r 0))) (gt $n (float64 (index $r 1))) }}
{{- fail (printf "config.controller.%s: %v is outside [%v, %v]" $key $v (index $r 0) (index $r 1)) }}
{{- end }}
{{- if has $key (list "grow_max_step" "latency_guard_max_steps") }}
{{- $_ := set $out $key (int64 $n) }}
{{- else }}
{{- $_ := set $out $key $n }}
{{- end }}
{{- else }}
{{- include "colocate.duration" (list (printf "config.controller.%s" $key) $v) }}
{{- $_ := set $out $key $v }}
{{- end }}
{{- end }}
{{- if regexMatch "^\\s*(0+\\s*[a-zµ]+\\s*)+$" (toString (default "30s" $out.trend_window)) }}
{{- fail "config.controller.trend_window: must be longer than 0s" }}
{{- end }}
{{- if gt (float64 (default 0.0 $out.latency_slack_shrink)) (float64 (default 0.1 $out.latency_slack_hold)) }}
{{- fail (printf "config.controller.latency_slack_shrink: %v is above latency_slack_hold (%v); training would shrink before it stops growing" $out.latency_slack_shrink $out.latency_slack_hold) }}
{{- end }}
{{- toYaml $out }}
{{- end }}

{{/* Checks of config.run and config.services, worded as `colocate check-config` words them. */}}
{{- define "colocate.validate" -}}
{{- range $key := list "tick" "debounce" "sample_stale_after" }}
{{- include "colocate.duration" (list (printf "config.run.%s" $key) (index $.Values.config.run $key)) }}
{{- end }}
{{- $seen := dict }}
{{- range $i, $s := .Values.config.services }}
{{- $at := printf "config.services[%d]" $i }}
{{- $key := printf "%s/%s" $s.namespace $s.name }}
{{- if hasKey $seen $key }}
{{- fail (printf "%s.name: `%s` is listed twice" $at $key) }}
{{- end }}
{{- $_ := set $seen $key true }}
{{- if and (not $s.hpa) (not $s.selector) }}
{{- fail (printf "%s.hpa: give an HPA name or a selector" $at) }}
{{- end }}
{{- if and $s.hpa $s.selector }}
{{- fail (printf "%s.selector: give an HPA name or a selector, not both" $at) }}
{{- end }}
{{- range $source := list "load" "latency_p99" }}
{{- with (index $s $source) }}
{{- if eq (len (pick . "promql" "scrape")) 1 | not }}
{{- fail (printf "%s.%s: give exactly one of promql, scrape" $at $source) }}
{{- end }}
{{- if and .promql (not $.Values.config.run.prometheus_url) }}
{{- fail (printf "%s.%s: a promql source needs config.run.prometheus_url" $at $source) }}
{{- end }}
{{- end }}
{{- end }}
{{- include "colocate.duration" (list (printf "%s.slo_p99" $at) $s.slo_p99) }}
{{- if and $s.latency_p99 (not $s.slo_p99) }}
{{- fail (printf "%s.slo_p99: a latency_p99 source needs the SLO to compare it with" $at) }}
{{- end }}
{{- end }}
{{- end }}

{{/* Fails on a bare number given for a duration (the schema lets numbers through to here). */}}
{{- define "colocate.duration" -}}
{{- $path := index . 0 }}{{- $v := index . 1 }}
{{- if and (not (kindIs "invalid" $v)) (not (kindIs "string" $v)) }}
{{- fail (printf "%s: `%v` has no unit; write a duration such as 500ms, 15s, 5m or 1h 30m" $path $v) }}
{{- end }}
{{- end }}
