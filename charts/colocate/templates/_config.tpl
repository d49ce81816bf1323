{{/*
The controller's configuration file and the checks of `colocate check-config` that
values.schema.json cannot express (src/live/config/mod.rs RunConfig::resolve, crates/core/src/config.rs
Config::validate), worded as check-config words them, so that a bad value fails at install
rather than in a crash loop. tests/chart.rs runs every refusal through both and keeps them in
step. The schema checks types, ranges of numbers, unknown keys, duration syntax and metric
names; everything that compares two values, needs a number given as a string by --set, or
needs a clearer message than "does not match pattern" is checked here.
*/}}

{{/*
Ranges of the controller's numeric settings (crates/core/src/config.rs). values.schema.json checks
numbers given in values files; `--set` passes 1.5 as the string "1.5", which the schema lets
through and colocate.controllerConfig catches.
*/}}
{{- define "colocate.numericSettings" -}}
target_utilization: [0, 1]
safety_margin: [0, 0.9]
usage_cpu_margin: [0, 0.9]
usage_memory_margin: [0, 0.9]
usage_cpu_overcommit: [0, 4]
batch_rise_threshold: [0, 1]
reserve_tolerance: [0, 1]
reserve_quantum: [0, 1]
grow_min_gain: [0, 10]
latency_slack_hold: [-1, 1]
latency_slack_shrink: [-1, 1]
latency_shrink_fraction: [0, 1]
usage_latency_shrink_fraction: [0, 1]
grow_max_step: [1, 4294967295]
latency_guard_max_steps: [0, 4294967295]
{{- end }}

{{/*
The controller's own defaults (crates/core/src/config.rs, src/live/config/mod.rs) of the settings
the checks below compare, for a key the values leave out or set to null: the rendered file
leaves it out too, and the controller applies the same default. tests/chart.rs keeps them equal
to what `colocate check-config` prints for an empty file.
*/}}
{{- define "colocate.controllerDefaults" -}}
controller:
  trend_window: 30s
  hpa_sync_period: 15s
  latency_slack_hold: 0.1
  latency_slack_shrink: 0
run:
  tick: 10s
  debounce: 50ms
  sample_stale_after: 60s
  sample_interval: 1s
  lease_duration: 15s
  status_interval: 5s
  master_timeout: 5s
{{- end }}

{{/*
The controller: block of the config file: numbers given as strings (by --set) become numbers,
durations are parsed, and the range and consistency checks of Config::validate are repeated.
*/}}
{{- define "colocate.controllerConfig" -}}
{{- $defaults := (include "colocate.controllerDefaults" . | fromYaml).controller }}
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
{{- else if eq $key "capacity" }}
{{- $_ := set $out $key $v }}
{{- else if eq $key "completion_time_split" }}
{{- if not (kindIs "bool" $v) }}
{{- fail (printf "config.controller.%s: invalid type: string %q, expected a boolean" $key (toString $v)) }}
{{- end }}
{{- $_ := set $out $key $v }}
{{- else }}
{{- $_ := include "colocate.durationNs" (list (printf "config.controller.%s" $key) $v "0s") }}
{{- $_ := set $out $key $v }}
{{- end }}
{{- end }}
{{- /* Not `merge`: it takes a given 0 for missing. */}}
{{- $given := deepCopy $out }}
{{- range $key, $default := $defaults }}
{{- if not (hasKey $given $key) }}{{ $_ := set $given $key $default }}{{ end }}
{{- end }}
{{- if eq (include "colocate.durationNs" (list "config.controller.trend_window" $given.trend_window "")) "0" }}
{{- fail "config.controller.trend_window: must be longer than 0s" }}
{{- end }}
{{- if eq (include "colocate.durationNs" (list "config.controller.hpa_sync_period" $given.hpa_sync_period "")) "0" }}
{{- fail "config.controller.hpa_sync_period: must be longer than 0s" }}
{{- end }}
{{- if gt (float64 $given.latency_slack_shrink) (float64 $given.latency_slack_hold) }}
{{- fail (printf "config.controller.latency_slack_shrink: %v is above latency_slack_hold (%v); training would shrink before it stops growing" $given.latency_slack_shrink $given.latency_slack_hold) }}
{{- end }}
{{- toYaml $out }}
{{- end }}

{{/*
Checks of config.run and config.services, in the order RunConfig::resolve makes them. A run
duration left out (or set to null) is the controller's default, as in the file.
*/}}
{{- define "colocate.validate" -}}
{{- $run := .Values.config.run }}
{{- range $peer := list "master" "prometheus" }}
{{- $t := index $.Values.tls $peer }}
{{- $at := printf "tls.%s" $peer }}
{{- if and (not $t.existingSecret) (or $t.caKey $t.certKey $t.keyKey) }}
{{- fail (printf "%s.existingSecret: name the Secret that holds the keys %s.caKey / certKey / keyKey refer to" $at $at) }}
{{- end }}
{{- if and $t.existingSecret (not (or $t.caKey $t.certKey $t.keyKey)) }}
{{- fail (printf "%s.existingSecret: %s names no file of it; set caKey, or certKey with keyKey" $at $t.existingSecret) }}
{{- end }}
{{- if and $t.certKey (not $t.keyKey) }}
{{- fail (printf "%s.keyKey: the client certificate (certKey %s) needs its key" $at $t.certKey) }}
{{- end }}
{{- if and $t.keyKey (not $t.certKey) }}
{{- fail (printf "%s.certKey: the client key (keyKey %s) needs its certificate" $at $t.keyKey) }}
{{- end }}
{{- end }}
{{- $defaults := (include "colocate.controllerDefaults" . | fromYaml).run }}
{{- $given := dict }}
{{- $ns := dict }}
{{- range $key, $default := $defaults }}
{{- $v := index $run $key }}
{{- $_ := set $given $key (ternary $default $v (kindIs "invalid" $v)) }}
{{- $_ := set $ns $key (int64 (include "colocate.durationNs" (list (printf "config.run.%s" $key) $v $default))) }}
{{- end }}
{{- range $key := list "sample_interval" "status_interval" "sample_stale_after" "master_timeout" }}
{{- if eq (index $ns $key) 0 }}
{{- fail (printf "config.run.%s: must be longer than 0s" $key) }}
{{- end }}
{{- end }}
{{- if le $ns.sample_stale_after $ns.sample_interval }}
{{- fail (printf "config.run.sample_stale_after: must be longer than config.run.sample_interval (%v)" $given.sample_interval) }}
{{- end }}
{{- if lt $ns.lease_duration 3000000000 }}
{{- fail "config.run.lease_duration: must be at least 3s" }}
{{- end }}
{{- if ge $ns.lease_duration 2147483647000000000 }}
{{- fail "config.run.lease_duration: must be shorter than 2147483647s (a Lease holds whole seconds in 32 bits)" }}
{{- end }}
{{- if eq $ns.tick 0 }}
{{- fail "config.run.tick: must be longer than 0s" }}
{{- end }}
{{- if ge $ns.debounce $ns.tick }}
{{- fail (printf "config.run.debounce: must be shorter than the tick (%v)" $given.tick) }}
{{- end }}
{{- with $run.prometheus_url }}
{{- include "colocate.httpUrl" (list "config.run.prometheus_url" .) }}
{{- end }}
{{- if eq (toString ($.Values.config.controller.capacity | default "requests")) "usage" }}
{{- if not $run.prometheus_url }}
{{- fail "config.controller.capacity: usage reads pods' CPU and memory usage from Prometheus (config.run.usage_cpu_query, config.run.usage_memory_query): set config.run.prometheus_url" }}
{{- end }}
{{- range $key := list "usage_cpu_query" "usage_memory_query" }}
{{- if and (hasKey $run $key) (not (trim (toString (index $run $key)))) }}
{{- fail (printf "config.run.%s: the query is empty" $key) }}
{{- end }}
{{- end }}
{{- end }}
{{- $seen := dict }}
{{- range $i, $s := .Values.config.services }}
{{- $at := printf "config.services[%d]" $i }}
{{- $_ := include "colocate.durationNs" (list (printf "%s.slo_p99" $at) $s.slo_p99 "0s") }}
{{- range $source := list "load" "latency_p99" }}
{{- $m := index $s $source }}
{{- /* Not `with`: an empty map is false to it, and `load: {}` must fail. */}}
{{- if not (kindIs "invalid" $m) }}
{{- if eq (len (pick $m "promql" "scrape")) 1 | not }}
{{- fail (printf "%s.%s: give exactly one of promql, scrape" $at $source) }}
{{- end }}
{{- with $m.scrape }}
{{- include "colocate.httpUrl" (list (printf "%s.%s.scrape.url" $at $source) .url) }}
{{- end }}
{{- end }}
{{- end }}
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
{{- with $s.selector }}
{{- if not (and (mustRegexMatch (include "colocate.selectorPattern" $) .) (regexMatch `[^\s,]` .)) }}
{{- fail (printf "%s.selector: `%s` is not a label selector such as app=web,tier in (a, b),track!=canary,!beta" $at .) }}
{{- end }}
{{- end }}
{{- range $source := list "load" "latency_p99" }}
{{- if and (index $s $source) (index $s $source).promql (not $run.prometheus_url) }}
{{- fail (printf "%s.%s: a promql source needs config.run.prometheus_url" $at $source) }}
{{- end }}
{{- end }}
{{- if and $s.latency_p99 (not $s.slo_p99) }}
{{- fail (printf "%s.slo_p99: a latency_p99 source needs the SLO to compare it with" $at) }}
{{- end }}
{{- if and $s.slo_p99 (not $s.latency_p99) }}
{{- fail (printf "%s.latency_p99: an slo_p99 needs a latency_p99 source to compare with" $at) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
A duration as `colocate check-config` reads it (humantime: whole numbers with a unit, several
parts such as "1h 30m" or "1h30m"), in nanoseconds, printed; fails naming KEY on a bare
number, an unknown unit or a duration too long for the int64 nanoseconds it is compared in
(290 years; check-config takes longer ones, no setting needs them). humantime also takes
fractions ("1.5s"), which the schema's pattern refuses: whether one is exact to the
nanosecond, as humantime requires, is more than this parser should repeat.
Arguments: (list KEY VALUE DEFAULT); DEFAULT is used when VALUE is null or left out.
*/}}
{{- define "colocate.durationNs" -}}
{{- $key := index . 0 }}{{- $v := index . 1 }}
{{- if kindIs "invalid" $v }}{{ $v = index . 2 }}{{ end }}
{{- if not (kindIs "string" $v) }}
{{- fail (printf "%s: `%v` has no unit; write a duration such as 500ms, 15s, 5m or 1h 30m" $key $v) }}
{{- end }}
{{- if not (mustRegexMatch `^\s*([0-9]+\s*[a-zA-Zµ]+\s*)+$` $v) }}
{{- fail (printf "%s: `%s` is not a duration such as 500ms, 15s, 5m or 1h 30m" $key $v) }}
{{- end }}
{{- /* humantime's units (src: humantime 2.4 Unit::from_str), in nanoseconds. */}}
{{- $s := 1000000000 }}
{{- $units := dict "nanos" 1 "nsec" 1 "ns" 1 "usec" 1000 "us" 1000 "µs" 1000 "millis" 1000000 "msec" 1000000 "ms" 1000000 }}
{{- range $u := list "seconds" "second" "secs" "sec" "s" }}{{ $_ := set $units $u $s }}{{ end }}
{{- range $u := list "minutes" "minute" "min" "mins" "m" }}{{ $_ := set $units $u (mul 60 $s) }}{{ end }}
{{- range $u := list "hours" "hour" "hr" "hrs" "h" }}{{ $_ := set $units $u (mul 3600 $s) }}{{ end }}
{{- range $u := list "days" "day" "d" }}{{ $_ := set $units $u (mul 86400 $s) }}{{ end }}
{{- range $u := list "weeks" "week" "wk" "wks" "w" }}{{ $_ := set $units $u (mul 604800 $s) }}{{ end }}
{{- range $u := list "months" "month" "M" }}{{ $_ := set $units $u (mul 2630016 $s) }}{{ end }}
{{- range $u := list "years" "year" "yr" "yrs" "y" }}{{ $_ := set $units $u (mul 31557600 $s) }}{{ end }}
{{- $total := 0 }}
{{- $approx := 0.0 }}
{{- range $part := regexFindAll `[0-9]+\s*[a-zA-Zµ]+` $v -1 }}
{{- $number := regexFind `^[0-9]+` $part }}
{{- $unit := regexReplaceAll `^[0-9]+\s*` $part "" }}
{{- if not (hasKey $units $unit) }}
{{- fail (printf "%s: `%s` is not a duration such as 500ms, 15s, 5m or 1h 30m (unknown time unit %q)" $key $v $unit) }}
{{- end }}
{{- /* The float sum guards the int64 one against overflow; leading zeros would make int64 read octal. */}}
{{- $approx = addf $approx (mulf (float64 $number) (float64 (index $units $unit))) }}
{{- if ge $approx 9.2e18 }}
{{- fail (printf "%s: `%s` is longer than the chart can compare (290 years)" $key $v) }}
{{- end }}
{{- $total = add $total (mul (int64 (regexReplaceAll `^0+([0-9])` $number "${1}")) (index $units $unit)) }}
{{- end }}
{{- $total }}
{{- end }}

{{/*
Fails unless URL is what src/live/config/services.rs `http_url` accepts (the `url` crate's parser, then
scheme http or https and a host), worded as check-config words it. The host is a DNS name, a dotted IPv4
address or a bracketed IPv6 address; the parser takes some odder forms (IPv4 written as one
number or in octal, IDNA `xn--` labels, `http:host`), which are refused here rather than
checked half.
Arguments: (list KEY URL).
*/}}
{{- define "colocate.httpUrl" -}}
{{- $key := index . 0 }}{{- $url := toString (index . 1) }}
{{- $scheme := regexFind `^[a-zA-Z][a-zA-Z0-9+.-]*:` $url | trimSuffix ":" | lower }}
{{- if not $scheme }}
{{- fail (printf "%s: `%s`: relative URL without a base" $key $url) }}
{{- else if not (has $scheme (list "http" "https")) }}
{{- fail (printf "%s: `%s`: scheme `%s` is not http or https" $key $url $scheme) }}
{{- end }}
{{- $octet := `(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])` }}
{{- $ipv4 := printf `(%s\.){3}%s\.?` $octet $octet }}
{{- $h := `[0-9a-fA-F]{1,4}` }}
{{- $ipv6 := printf `(%s:){7}%s|(%s:){1,7}:|(%s:){1,6}:%s|(%s:){1,5}(:%s){1,2}|(%s:){1,4}(:%s){1,3}|(%s:){1,3}(:%s){1,4}|(%s:){1,2}(:%s){1,5}|%s:(:%s){1,6}|:((:%s){1,7}|:)` $h $h $h $h $h $h $h $h $h $h $h $h $h $h $h $h }}
{{- /* A name whose last label is not a number: the parser reads such a host as IPv4. */}}
{{- $label := `[a-zA-Z0-9_-]+` }}
{{- $name := printf `(%s\.)*[a-zA-Z0-9_-]*[a-zA-Z_-][a-zA-Z0-9_-]*\.?` $label }}
{{- $port := `(:0*([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])?)?` }}
{{- $pattern := printf `^(?i:https?)://([^/?#@\s]*@)?(%s|\[(%s)\]|%s)%s([/?#].*)?$` $ipv4 $ipv6 $name $port }}
{{- $odd := printf `^(?i:https?)://([^/?#@\s]*@)?((%s\.)*0[xX][0-9a-fA-F]*\.?([:/?#]|$)|([^/?#:]*\.)?(?i:xn--))` $label }}
{{- if or (not (mustRegexMatch $pattern $url)) (mustRegexMatch $odd $url) }}
{{- fail (printf "%s: `%s`: not an http(s)://HOST[:PORT][/PATH] URL (HOST a DNS name, an IPv4 address or [an IPv6 address])" $key $url) }}
{{- end }}
{{- end }}

{{/*
A label selector as src/live/selector.rs parses it: requirements joined by commas, each
`key`, `!key`, `key=value` (or == or !=), or `key in (a, b)` / `key notin (a, b)`. Keys and
values are limited to the characters Kubernetes labels use; the controller's parser is looser
(it takes any key without whitespace), but a label with other characters cannot exist, so such
a selector would match no pod.
*/}}
{{- define "colocate.selectorPattern" -}}
{{- /* Keys: an optional lowercase DNS prefix and `/`, then a name; values: empty or a name. */}}
{{- $name := `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?` }}
{{- $k := printf `([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?%s` $name }}
{{- $v := printf `(%s)?` $name }}
{{- $requirement := printf `(!\s*%s|%s\s* (in|notin) \s*\((\s*%s\s*,)*\s*%s\s*\)|%s\s*(!=|==|=)\s*%s|%s)` $k $k $v $v $k $v $k }}
{{- printf `^\s*(%s\s*)?(,\s*(%s\s*)?)*$` $requirement $requirement }}
{{- end }}

{{/*
podDisruptionBudget.minAvailable must leave at least one replica evictable, or every node
drain blocks on the controller. A percentage rounds up, as the disruption controller rounds it.
*/}}
{{- define "colocate.validatePdb" -}}
{{- $replicas := int64 .Values.replicaCount }}
{{- $min := .Values.podDisruptionBudget.minAvailable }}
{{- $pods := 0 }}
{{- if kindIs "string" $min }}
{{- $pct := int64 (regexReplaceAll `^0+([0-9])` (trimSuffix "%" $min) "${1}") }}
{{- $pods = div (add (mul $pct $replicas) 99) 100 }}
{{- else }}
{{- $pods = int64 $min }}
{{- end }}
{{- if ge $pods $replicas }}
{{- fail (printf "podDisruptionBudget.minAvailable: %v is not below replicaCount (%d): every node drain would block on the controller's pods" $min $replicas) }}
{{- end }}
{{- end }}
