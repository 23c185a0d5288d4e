{{/* The release's full name, trimmed to a valid object name. */}}
{{- define "nodeagent.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "nodeagent.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "nodeagent.labels" -}}
{{ include "nodeagent.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "nodeagent.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "nodeagent.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* repository:tag, or repository:tag@digest (a runtime pulls the digest). No default
repository: one no node can pull would fail on every node as ImagePullBackOff, this fails the
install. */}}
{{- define "nodeagent.image" -}}
{{- $repo := required "image.repository is unset: set it to the registry path your nodes pull nodeagent from (--set image.repository=REGISTRY/nodeagent), or install the chart hack/release pushed" .Values.image.repository -}}
{{- $ref := printf "%s:%s" $repo (default .Chart.AppVersion .Values.image.tag) -}}
{{- if .Values.image.digest }}{{ $ref = printf "%s@%s" $ref .Values.image.digest }}{{ end -}}
{{- $ref -}}
{{- end -}}

{{/* config.toml: the user's config with the metrics address set from metrics.port, and
kured's DaemonSet from kured.daemonSet. */}}
{{- define "nodeagent.configToml" -}}
{{- $cfg := deepCopy .Values.config -}}
{{- $reporting := default (dict) $cfg.reporting -}}
{{- if not (hasKey $reporting "metrics_address") -}}
{{- $_ := set $reporting "metrics_address" (printf "0.0.0.0:%d" (int .Values.metrics.port)) -}}
{{- end -}}
{{- $_ := set $cfg "reporting" $reporting -}}
{{- if .Values.kured.daemonSet -}}
{{- $alongside := default (dict) $cfg.alongside -}}
{{- if and (hasKey $alongside "kured_daemonset") (ne (toString $alongside.kured_daemonset) .Values.kured.daemonSet) -}}
{{- fail (printf "config.alongside.kured_daemonset (%v) is not kured.daemonSet (%s), the DaemonSet the chart grants reading: set kured.daemonSet only" $alongside.kured_daemonset .Values.kured.daemonSet) -}}
{{- end -}}
{{- $_ := set $alongside "kured_daemonset" .Values.kured.daemonSet -}}
{{- $_ := set $cfg "alongside" $alongside -}}
{{- end -}}
{{- toToml $cfg -}}
{{- end -}}
