{{/* Chart name, truncated to the 63 characters a label value allows. */}}
{{- define "staticfleet.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name: <release>-staticfleet, or the release name alone if it already contains the
chart name. Kept at 50 characters so suffixes like "-coordinator" still fit in 63.
*/}}
{{- define "staticfleet.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "staticfleet.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "staticfleet.selectorLabels" -}}
app.kubernetes.io/name: {{ include "staticfleet.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "staticfleet.labels" -}}
helm.sh/chart: {{ include "staticfleet.chart" . }}
{{ include "staticfleet.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: staticfleet
{{- end }}

{{- define "staticfleet.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "staticfleet.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "staticfleet.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "staticfleet.coordinatorService" -}}
{{- printf "%s-coordinator" (include "staticfleet.fullname" .) }}
{{- end }}

{{- /* The coordinator's TLS Secret ("" when it serves plain HTTP). */}}
{{- define "staticfleet.coordinatorTlsSecret" -}}
{{- if .Values.coordinator.tls.secretName }}
{{- .Values.coordinator.tls.secretName }}
{{- else if .Values.coordinator.tls.generate }}
{{- printf "%s-coordinator-tls" (include "staticfleet.fullname" .) }}
{{- end }}
{{- end }}

{{- /* The coordinator Service's names, space-separated (its serving certificate's). */}}
{{- define "staticfleet.coordinatorDnsNames" -}}
{{- $svc := include "staticfleet.coordinatorService" . }}
{{- $ns := .Release.Namespace }}
{{- printf "%s %s.%s %s.%s.svc %s.%s.svc.cluster.local" $svc $svc $ns $svc $ns $svc $ns }}
{{- end }}

{{- define "staticfleet.coordinatorScheme" -}}
{{- if include "staticfleet.coordinatorTlsSecret" . }}https{{ else }}http{{ end }}
{{- end }}

{{- define "staticfleet.coordinatorUrl" -}}
{{- if .Values.coordinator.advertisedUrl }}
{{- .Values.coordinator.advertisedUrl }}
{{- else }}
{{- printf "%s://%s.%s.svc:%d" (include "staticfleet.coordinatorScheme" .) (include "staticfleet.coordinatorService" .) .Release.Namespace (int .Values.coordinator.port) }}
{{- end }}
{{- end }}

{{- define "staticfleet.webhookService" -}}
{{- printf "%s-webhook" (include "staticfleet.fullname" .) }}
{{- end }}

{{- define "staticfleet.webhookSecret" -}}
{{- printf "%s-webhook-tls" (include "staticfleet.fullname" .) }}
{{- end }}

{{- define "staticfleet.webhookCertificate" -}}
{{- printf "%s-webhook" (include "staticfleet.fullname" .) }}
{{- end }}

{{- define "staticfleet.adminSecretName" -}}
{{- default (printf "%s-admin-token" (include "staticfleet.fullname" .)) .Values.auth.adminToken.existingSecret }}
{{- end }}

{{- define "staticfleet.peeringName" -}}
{{- default (include "staticfleet.clusterScopedName" .) .Values.peering.name }}
{{- end }}

{{- define "staticfleet.dataClaimName" -}}
{{- default (printf "%s-data" (include "staticfleet.fullname" .)) .Values.store.persistence.existingClaim }}
{{- end }}

{{/* True ("true") when the operator watches every namespace. */}}
{{- define "staticfleet.clusterWide" -}}
{{- if empty .Values.watchNamespaces }}true{{ end }}
{{- end }}

{{/*
RBAC rules the operator needs inside every namespace it watches (a Role there, or the
ClusterRole when it watches all namespaces). Nothing here is a wildcard.
*/}}
{{- define "staticfleet.namespacedRules" -}}
# The ConsumerGroup resource: watch, patch (Kopf's progress annotations), status, and
# finalizers (ownerReferences with blockOwnerDeletion on the managed pods).
- apiGroups: ["staticfleet.dev"]
  resources: ["consumergroups"]
  verbs: ["get", "list", "watch", "patch", "update"]
- apiGroups: ["staticfleet.dev"]
  resources: ["consumergroups/status"]
  verbs: ["get", "patch", "update"]
- apiGroups: ["staticfleet.dev"]
  resources: ["consumergroups/finalizers"]
  verbs: ["update"]
# Member pods: managed pods are created and deleted by the operator, adopted pods are
# watched and annotated with their slot.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "create", "delete", "patch"]
# Events on ConsumerGroups (Kopf posts core/v1 events).
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
# Member tokens: the operator watches the Opaque Secrets (a Kopf index: a group's token is
# read from memory, and a rotated or deleted Secret is seen at once), reads each group's
# token Secret (its own `<group>-member-token` or the group's spec.tokenSecretRef) and
# creates its own once. Kafka-coordinated groups: it reads the Secrets spec.coordinator.kafka
# names (get: a kubernetes.io/tls Secret is not in the index) and writes each group's
# `<group>-kafka-client` Secret (the members' client configuration), patching it when the
# credentials rotate. It never deletes Secrets (the ownerReference lets the garbage
# collector delete them). rbac.secretWatch=false: no informer, each pass GETs what it reads.
- apiGroups: [""]
  resources: ["secrets"]
  {{- if .Values.rbac.secretWatch }}
  verbs: ["get", "list", "watch", "create", "patch"]
  {{- else }}
  verbs: ["get", "create", "patch"]
  {{- end }}
# Each managed group's PodDisruptionBudget `<group>-members` over its member pods: read each
# pass, created and patched to the spec's disruption.maxUnavailable (delete: the garbage
# collector deletes it with the group; the verb lets an operator remove a stray one).
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
{{- end }}

{{/*
Name for cluster-scoped objects (ClusterRole, webhook configuration, ClusterKopfPeering):
the release's namespace is part of it, so one release name in two namespaces never clashes.
*/}}
{{- define "staticfleet.clusterScopedName" -}}
{{- printf "%s-%s" .Release.Namespace (include "staticfleet.fullname" .) | trunc 253 | trimSuffix "-" }}
{{- end }}
