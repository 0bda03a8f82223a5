{{/* kafkaguard's chart helpers. */}}

{{- define "kafkaguard.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kafkaguard.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kafkaguard.labels" -}}
{{ include "kafkaguard.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The admin listener's port (admin.port, kafkaguard's default 9404). The probes need it
     reachable: admin.bind_host must not be a loopback address. */}}
{{- define "kafkaguard.adminPort" -}}
{{- $admin := required "config.admin is required: the probes and metrics use the admin listener" .Values.config.admin -}}
{{- if hasPrefix "127." (toString (default "127.0.0.1" $admin.bind_host)) -}}
{{- fail "config.admin.bind_host must be reachable from the kubelet (0.0.0.0), with allow_remote: true" -}}
{{- end -}}
{{- default 9404 $admin.port -}}
{{- end -}}

{{/* Every client-facing port as a JSON list of {name, port}: a listener's bootstrap port,
     and with routing: ports (the default) one port per node in brokerNodeIds
     (broker_ports.base + id, default port + 1) or each broker_ports.map entry. Names are
     l<listener index>[-n<node id>]: Kubernetes port names have at most 15 characters. */}}
{{- define "kafkaguard.listenerPorts" -}}
{{- $all := list -}}
{{- range $index, $listener := .Values.config.listeners -}}
{{- $name := printf "l%d" $index -}}
{{- $all = append $all (dict "name" $name "port" (int $listener.port)) -}}
{{- if ne (default "ports" $listener.routing) "sni" -}}
{{- $ports := default dict $listener.broker_ports -}}
{{- if $ports.map -}}
{{- range $node, $port := $ports.map -}}
{{- $all = append $all (dict "name" (printf "%s-n%v" $name $node) "port" (int $port)) -}}
{{- end -}}
{{- else -}}
{{- $base := int (default (add1 $listener.port) $ports.base) -}}
{{- range $node := $.Values.brokerNodeIds -}}
{{- $all = append $all (dict "name" (printf "%s-n%v" $name $node) "port" (add $base $node)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toJson $all -}}
{{- end -}}

{{/* Seconds from deletion to SIGKILL: the preStop sleep, the drain (shutdown_timeout_ms,
     kafkaguard's default 30 s) and a margin. */}}
{{- define "kafkaguard.gracePeriod" -}}
{{- $drain := div (int (default 30000 .Values.config.shutdown_timeout_ms)) 1000 -}}
{{- add (int .Values.preStopSleepSeconds) $drain (int .Values.terminationMarginSeconds) 1 -}}
{{- end -}}
