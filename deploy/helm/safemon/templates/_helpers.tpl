{{/* The release's resource name: the release name, or "<release>-safemon" when it differs. */}}
{{- define "safemon.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "safemon.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "safemon.selector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "safemon.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The Prometheus `job` label of the targets: the Service's name for a ServiceMonitor,
     "<namespace>/<PodMonitor name>" for a PodMonitor (the operator's defaults). */}}
{{- define "safemon.job" -}}
{{- if eq .Values.mode "node" -}}
{{ include "safemon.fullname" . }}
{{- else -}}
{{ .Release.Namespace }}/{{ include "safemon.fullname" . }}
{{- end -}}
{{- end -}}

{{/* The ipc:// socket directory: a subdirectory of the /run/safemon emptyDir, because the
     daemon refuses a socket directory it does not own or that others may enter (an emptyDir's
     root is root-owned, mode 0777); the daemon creates it 0700 at start. */}}
{{- define "safemon.runtimeDir" -}}
/run/safemon/sock
{{- end -}}

{{/* The daemon's config.yaml: .Values.config plus what the chart owns. */}}
{{- define "safemon.config" -}}
{{- $c := deepCopy .Values.config -}}
{{- $_ := set $c "name" (default (include "safemon.fullname" . | trunc 32 | trimSuffix "-") $c.name) -}}
{{- $ep := default (dict) $c.endpoints -}}
{{- $_ := set $ep "runtime_dir" (include "safemon.runtimeDir" .) -}}
{{- if eq .Values.mode "node" -}}
{{- $_ := set $ep "ingress" (printf "tcp://0.0.0.0:%d" (int .Values.node.ingressPort)) -}}
{{- $_ := set $c "security" (dict "curve" true "keys_dir" "/run/safemon-keys/curve") -}}
{{- end -}}
{{- $_ := set $c "endpoints" $ep -}}
{{- $_ := set $c "metrics" (dict "host" "0.0.0.0" "port" (int .Values.metricsPort)) -}}
{{- toYaml $c -}}
{{- end -}}

{{/* The safemon container: the same in both modes but for its env and mounts. */}}
{{- define "safemon.probes" -}}
startupProbe:
  # Kernel compilation and the start-up self-tests; /readyz passes once a voting set formed.
  httpGet: {path: /readyz, port: metrics}
  periodSeconds: 5
  failureThreshold: 60
readinessProbe:
  # Unready in SAFE (latched until `safemon reset`): no traffic is sent to a voter that
  # releases nothing.
  httpGet: {path: /readyz, port: metrics}
  periodSeconds: 5
  timeoutSeconds: 2
livenessProbe:
  # The process serves HTTP and its event loop turns; SAFE does not fail it (a restart would
  # clear the latched state and hide the fault).
  httpGet: {path: /healthz, port: metrics}
  periodSeconds: 10
  timeoutSeconds: 2
  failureThreshold: 3
{{- end -}}

{{- define "safemon.securityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
privileged: false
capabilities:
  drop: ["ALL"]
{{- end -}}
