{{/* Names and labels. The configuration file and its checks are in _config.tpl. */}}

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

{{/* Where the TLS files of `tls.<peer>` are mounted, and the Prometheus token. */}}
{{- define "colocate.tlsDir" -}}/var/run/secrets/colocate-tls/{{ . }}{{- end }}
{{- define "colocate.prometheusTokenDir" -}}/var/run/secrets/colocate-prometheus{{- end }}

{{/* The run block's TLS files of one peer, as the controller reads them. Argument: (list ROOT PEER). */}}
{{- define "colocate.tlsFiles" -}}
{{- $t := index (index . 0).Values.tls (index . 1) }}{{- $dir := include "colocate.tlsDir" (index . 1) }}
{{- $files := dict }}
{{- with $t.caKey }}{{- $_ := set $files "ca_file" (printf "%s/%s" $dir .) }}{{- end }}
{{- with $t.certKey }}{{- $_ := set $files "cert_file" (printf "%s/%s" $dir .) }}{{- end }}
{{- with $t.keyKey }}{{- $_ := set $files "key_file" (printf "%s/%s" $dir .) }}{{- end }}
{{- toJson $files }}
{{- end }}

{{/* Whether an optional monitoring object is rendered: true, false, or auto (its CRD is served). */}}
{{- define "colocate.monitoringEnabled" -}}
{{- $setting := index . 0 }}{{- $root := index . 1 }}{{- $kind := index . 2 }}
{{- if eq (toString $setting) "auto" }}
{{- if $root.Capabilities.APIVersions.Has (printf "monitoring.coreos.com/v1/%s" $kind) }}true{{ end }}
{{- else if eq (toString $setting) "true" }}true
{{- end }}
{{- end }}
