{{/*
Names, labels, images and shared snippets for every template.
*/}}

{{- define "knowledge-base.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The object-name prefix: at most 50 characters, so that component suffixes such as
"-operator-discovery" still fit into 63.
*/}}
{{- define "knowledge-base.fullname" -}}
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

{{- define "knowledge-base.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "knowledge-base.operator.fullname" -}}
{{- printf "%s-operator" (include "knowledge-base.fullname" .) }}
{{- end }}

{{- define "knowledge-base.search.fullname" -}}
{{- printf "%s-search" (include "knowledge-base.fullname" .) }}
{{- end }}

{{/*
The Kubernetes username of the operator's ServiceAccount, as a TokenReview reports it.
*/}}
{{- define "knowledge-base.operator.username" -}}
{{- printf "system:serviceaccount:%s:%s" .Release.Namespace (include "knowledge-base.operator.fullname" .) }}
{{- end }}

{{- define "knowledge-base.qdrant.fullname" -}}
{{- printf "%s-qdrant" (include "knowledge-base.fullname" .) }}
{{- end }}

{{/*
Labels. Call with (dict "ctx" $ "component" "operator").
*/}}
{{- define "knowledge-base.labels" -}}
helm.sh/chart: {{ include "knowledge-base.chart" .ctx }}
{{ include "knowledge-base.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: knowledge-base
{{- end }}

{{- define "knowledge-base.selectorLabels" -}}
app.kubernetes.io/name: {{ include "knowledge-base.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/*
An image reference from {repository, tag, digest}. Call with (dict "image" .Values.x.image "ctx" $).
*/}}
{{- define "knowledge-base.image" -}}
{{- $tag := .image.tag | default .ctx.Chart.AppVersion | toString }}
{{- if .image.digest }}
{{- printf "%s:%s@%s" .image.repository $tag .image.digest }}
{{- else }}
{{- printf "%s:%s" .image.repository $tag }}
{{- end }}
{{- end }}

{{/*
The Secret holding the search service's API (write) token and optional read token.
*/}}
{{- define "knowledge-base.tokenSecretName" -}}
{{- .Values.auth.existingSecret | default (printf "%s-tokens" (include "knowledge-base.fullname" .)) }}
{{- end }}

{{/*
The Secret and key holding the Qdrant API key, or nothing when no key is used.
*/}}
{{- define "knowledge-base.qdrantSecretName" -}}
{{- if eq .Values.store.mode "server" }}
{{- .Values.store.server.existingSecret | default (printf "%s-qdrant" (include "knowledge-base.fullname" .)) }}
{{- else if eq .Values.store.mode "external" }}
{{- .Values.store.external.existingSecret }}
{{- end }}
{{- end }}

{{- define "knowledge-base.qdrantSecretKey" -}}
{{- if eq .Values.store.mode "server" }}
{{- .Values.store.server.existingSecretKey }}
{{- else }}
{{- .Values.store.external.existingSecretKey }}
{{- end }}
{{- end }}

{{- define "knowledge-base.qdrantURL" -}}
{{- if eq .Values.store.mode "server" }}
{{- printf "http://%s.%s.svc:6333" (include "knowledge-base.qdrant.fullname" .) .Release.Namespace }}
{{- else }}
{{- .Values.store.external.url }}
{{- end }}
{{- end }}

{{/*
The in-cluster URL of the search service, as the operator and NOTES use it.
*/}}
{{- define "knowledge-base.searchURL" -}}
{{- printf "http://%s.%s.svc:%v" (include "knowledge-base.search.fullname" .) .Release.Namespace .Values.search.service.port }}
{{- end }}

{{/*
The Host values the search service's /mcp endpoint answers (SEARCHSVC_MCP_ALLOWED_HOSTS): loopback
(probes, port-forwards), the Service's DNS names with and without its port, and any extra hosts
(an Ingress). Any other Host gets 421, the SDK's DNS-rebinding protection.
*/}}
{{- define "knowledge-base.search.mcpAllowedHosts" -}}
{{- $name := include "knowledge-base.search.fullname" . }}
{{- $ns := .Release.Namespace }}
{{- $port := .Values.search.service.port }}
{{- $hosts := list "127.0.0.1" "127.0.0.1:*" "localhost" "localhost:*" "[::1]" "[::1]:*" }}
{{- range $host := list $name (printf "%s.%s" $name $ns) (printf "%s.%s.svc" $name $ns) (printf "%s.%s.svc.%s" $name $ns $.Values.search.mcp.clusterDomain) }}
{{- $hosts = append $hosts $host }}
{{- $hosts = append $hosts (printf "%s:%v" $host $port) }}
{{- end }}
{{- $public := include "knowledge-base.search.publicHosts" . }}
{{- join "," (concat $hosts .Values.search.mcp.extraAllowedHosts (compact (splitList "," $public))) }}
{{- end }}

{{/*
A Secret value generated once: the existing value when the Secret is already in the cluster
(so upgrades keep it), else a new random one. `helm template` cannot look up, so it always
generates. Call with (dict "ctx" $ "name" <secret name> "key" <data key>).
*/}}
{{- define "knowledge-base.persistentRandom" -}}
{{- $existing := lookup "v1" "Secret" .ctx.Release.Namespace .name }}
{{- $data := dict }}
{{- if $existing }}{{ $data = (get $existing "data") | default dict }}{{ end }}
{{- $value := get $data .key }}
{{- if not $value }}
{{- /* kube-system exists in every cluster: no answer means this render has no cluster to keep values in. */}}
{{- if and (not (lookup "v1" "Namespace" "" "kube-system")) (not .ctx.Values.auth.generateWithoutCluster) }}
{{- fail (printf "Secret %s key %s: this render has no cluster (helm template, a GitOps tool, --dry-run=client), so a random value cannot be kept and every render would rotate it, breaking the clients that hold it. Set %s to a Secret you create (see docs/operations/install.md, GitOps), or auth.generateWithoutCluster=true for a render you will not apply." .name .key .setting) }}
{{- end }}
{{- $value = randAlphaNum 48 | b64enc }}
{{- end }}
{{- $value }}
{{- end }}

{{/*
Refuse combinations that cannot work, with a message that says what to change.
*/}}
{{- define "knowledge-base.validate" -}}
{{- if and (eq .Values.store.mode "embedded") (gt (int .Values.search.replicas) 1) }}
{{- fail (printf "search.replicas is %v, but store.mode=embedded allows exactly one replica: the embedded Qdrant Edge store locks its files on one volume. Set search.replicas=1, or use store.mode=server or store.mode=external to run several replicas." .Values.search.replicas) }}
{{- end }}
{{- if and (eq .Values.store.mode "external") (not .Values.store.external.url) }}
{{- fail "store.mode=external needs store.external.url (e.g. https://qdrant.example.com:6333)." }}
{{- end }}
{{- if and .Values.operator.allowLocalRepositories (not .Values.operator.localRepositoriesRoot) }}
{{- fail "operator.allowLocalRepositories=true needs operator.localRepositoriesRoot: the one folder (mounted into the operator) that local repositories must be in." }}
{{- end }}
{{- if and .Values.llm.model (not .Values.llm.baseUrl) (not .Values.llm.existingSecret) }}
{{- fail "llm.model on OpenAI's own endpoint needs llm.existingSecret: the name of a Secret holding the API key (key llm.existingSecretKey). For a server that needs no key, set llm.baseUrl." }}
{{- end }}
{{- if and (not .Values.llm.model) (or .Values.llm.baseUrl .Values.llm.existingSecret) }}
{{- fail "llm.baseUrl or llm.existingSecret is set but llm.model is not: set the chat model too, or leave all three empty for extractive answers." }}
{{- end }}
{{- if and (eq .Values.rerank.backend "llm") (not .Values.llm.model) }}
{{- fail "rerank.backend=llm ranks with the chat model: set llm.model too (or choose rerank.backend local or remote)." }}
{{- end }}
{{- if and (or .Values.search.ingress.enabled .Values.search.httpRoute.enabled) (eq .Values.search.trustedProxies "127.0.0.1") }}
{{- fail "search.ingress or search.httpRoute is enabled, but search.trustedProxies trusts only 127.0.0.1: set it to the address range of the ingress controller's or gateway's pods (e.g. 10.0.0.0/8), so the service believes their X-Forwarded-Proto and -For (Secure console cookies behind TLS, the client's address in logs)." }}
{{- end }}
{{- if and .Values.search.ingress.enabled (not .Values.search.ingress.hosts) }}
{{- fail "search.ingress.enabled needs search.ingress.hosts: the host names it serves (they are also allowed to reach /mcp)." }}
{{- end }}
{{- if and .Values.search.httpRoute.enabled (or (not .Values.search.httpRoute.parentRefs) (not .Values.search.httpRoute.hostnames)) }}
{{- fail "search.httpRoute.enabled needs search.httpRoute.parentRefs (the Gateway to attach to) and search.httpRoute.hostnames." }}
{{- end }}
{{- if and .Values.monitoring.serviceMonitor.enabled .Values.monitoring.podMonitor.enabled }}
{{- fail "monitoring.serviceMonitor and monitoring.podMonitor are both enabled: every target would be scraped twice. Enable one." }}
{{- end }}
{{- if and (eq .Values.embeddings.provider "openai") (not .Values.embeddings.openai.existingSecret) }}
{{- fail "embeddings.provider=openai needs embeddings.openai.existingSecret: the name of a Secret holding the API key (key embeddings.openai.existingSecretKey)." }}
{{- end }}
{{- end }}

{{/*
The writable scratch volume every container gets, since the root filesystem is read-only.
*/}}
{{- define "knowledge-base.tmpVolume" -}}
- name: tmp
  emptyDir:
    sizeLimit: {{ .sizeLimit }}
{{- end }}

{{/*
The operator's rules inside a watched namespace (or everywhere, in cluster-wide mode).
*/}}
{{- define "knowledge-base.operator.namespacedRules" -}}
# Its own resources: watch them, and patch finalizers and kopf's progress annotations.
- apiGroups: ["kb.knowledgebase.dev"]
  resources: ["knowledgesources"]
  verbs: ["get", "list", "watch", "patch"]
# Their status subresource: the sync results.
- apiGroups: ["kb.knowledgebase.dev"]
  resources: ["knowledgesources/status"]
  verbs: ["patch"]
# Events about each sync, posted by kopf.
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
# Repository credentials that a KnowledgeSource names. Read one by name; never list.
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get"]
{{- if gt (int .Values.operator.replicas) 1 }}
# Peering between replicas: read the peers and keep this replica's record alive.
- apiGroups: ["kopf.dev"]
  resources: [{{ ternary "clusterkopfpeerings" "kopfpeerings" (empty .Values.operator.watchNamespaces) | quote }}]
  verbs: ["get", "list", "watch", "patch"]
{{- end }}
{{- end }}

{{/*
A checksum of the Secrets you manage (existingSecret values) whose keys reach a container as
environment variables: an upgrade after you change one changes the pod template, and the pods
roll with the new value. Read with `lookup`, so `helm template` (and tools built on it) sees none
and the checksum stays put. The Secrets the chart generates keep their values on every upgrade;
the tokens file is a mounted volume, re-read without a restart. Call with (dict "ctx" $ "names" list).
*/}}
{{- define "knowledge-base.secretsChecksum" -}}
{{- $ns := .ctx.Release.Namespace }}
{{- $parts := list }}
{{- range $name := .names }}
{{- if $name }}
{{- $found := lookup "v1" "Secret" $ns $name | default dict }}
{{- $parts = append $parts (printf "%s=%s" $name (toJson (get $found "data" | default dict))) }}
{{- end }}
{{- end }}
{{- join "\n" $parts | sha256sum }}
{{- end }}

{{/*
Host names that reach the search Service from outside: the Ingress's hosts and the HTTPRoute's hostnames.
*/}}
{{- define "knowledge-base.search.publicHosts" -}}
{{- $hosts := list }}
{{- if .Values.search.ingress.enabled }}{{ $hosts = concat $hosts .Values.search.ingress.hosts }}{{ end }}
{{- if .Values.search.httpRoute.enabled }}{{ $hosts = concat $hosts .Values.search.httpRoute.hostnames }}{{ end }}
{{- join "," $hosts }}
{{- end }}
