{{- define "rso.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* fullnameOverride wins; otherwise release-name, with the chart name unless the release name already holds it */}}
{{- define "rso.fullname" -}}
{{- if .Values.fullnameOverride -}}{{ .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else -}}
{{- $name := include "rso.name" . -}}
{{- if contains $name .Release.Name -}}{{ .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else -}}{{ printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}{{- end -}}
{{- end -}}
{{- end -}}

{{- define "rso.labels" -}}
app.kubernetes.io/name: {{ include "rso.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "rso.selector" -}}
app.kubernetes.io/name: {{ include "rso.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The operator's own pods (the Deployment's template adds the component to its selector):
     every RocketStore's NetworkPolicy lets them in, and not the chart's helm test pod */}}
{{- define "rso.operatorPod" -}}
{{ include "rso.selector" . }}
app.kubernetes.io/component: operator
{{- end -}}

{{/* The helm test pod, which the operator's NetworkPolicy lets ask /healthz */}}
{{- define "rso.testPod" -}}
{{ include "rso.selector" . }}
app.kubernetes.io/component: test
{{- end -}}

{{- define "rso.serviceAccount" -}}
{{- default (include "rso.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/* What the operator may do: its own resource (plus status), the objects it builds, events. */}}
{{- define "rso.rules" -}}
- apiGroups: [rocketstore.io]
  resources: [rocketstores]
  verbs: [get, list, watch, patch]
- apiGroups: [rocketstore.io]
  resources: [rocketstores/status]
  verbs: [get, patch]
- apiGroups: [apps]
  resources: [statefulsets]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [""]
  resources: [services, configmaps, serviceaccounts]
  verbs: [get, list, watch, create, patch]
# the external Services of brokers scaled away or of external access switched off, an unused
# addresses ConfigMap (only objects the RocketStore controls)
- apiGroups: [""]
  resources: [services, configmaps]
  verbs: [delete]
- apiGroups: [""]
  resources: [persistentvolumeclaims]
  verbs: [get, list, patch]
# delete: a Lease group's rolling restart (its StatefulSets update OnDelete): the operator deletes
# each member's pod in turn, the Lease's master last
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, delete]
{{- if .Values.rbac.readReferencedSecrets }}
# the ACL / TLS Secrets a RocketStore references: read to report a missing Secret or key
- apiGroups: [""]
  resources: [secrets]
  verbs: [get]
{{- end }}
# a RocketStore's NetworkPolicy (spec.networkPolicy); delete: once the field is removed
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [get, list, watch, create, patch, delete]
# delete: a broker group's budget once its group is gone, the store-wide one once groups have slaves
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [get, list, watch, create, patch, delete]
# replication.failover Lease: the brokers' Role and RoleBinding (delete: once failover is off),
# and the Leases the brokers elect their masters on, read for status. Kubernetes lets the operator
# grant only what it holds itself, so it holds the brokers' get, create, update on Leases too
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles, rolebindings]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, list, watch, create, update]
- apiGroups: ["", events.k8s.io]
  resources: [events]
  verbs: [create, patch]
{{- end -}}


{{/* The image of the operator (and of its helm test pod) */}}
{{- define "rso.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The labels every broker pod carries (operator/rocketstore/operator/desired.py: labels) */}}
{{- define "rso.brokerSelector" -}}
app.kubernetes.io/name: rocketstore
app.kubernetes.io/component: broker
{{- end -}}
