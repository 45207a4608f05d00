#!/usr/bin/env bash
# Smoke test for the control plane built by build.sh: starts etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler and kwok on
# 127.0.0.1 only, registers one fake kwok node, checks that a pod is scheduled
# onto it and reported Running, then stops everything it started.
#
# Needs: bash, curl, openssl, python3 (free-port picking). No kubectl.
# CONTROLPLANE_BIN=<dir> skips build.sh; CONTROLPLANE_KEEP=1 keeps the work dir.
set -Eeuo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BIN="${CONTROLPLANE_BIN:-$("${HERE}/build.sh" | tail -n1)}"
STAGES="$(dirname "${BIN}")/kwok-stages.yaml"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/rs-controlplane.XXXXXX")"
PIDS=()

log() { printf '[smoke %5.1fs] %s\n' "$(($(date +%s%N) / 1000000 - T0))e-3" "$*" >&2; }
T0=$(($(date +%s%N) / 1000000))

stop_all() {
	local i pid n
	# Reverse start order: kwok, scheduler, controller-manager, apiserver, etcd.
	# Stopping etcd before the apiserver makes both hang for ~a minute.
	for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
		pid="${PIDS[i]}"
		kill -TERM "${pid}" 2>/dev/null || continue
		for ((n = 0; n < 100; n++)); do
			kill -0 "${pid}" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "${pid}" 2>/dev/null || true
		wait "${pid}" 2>/dev/null || true
	done
	if [[ "${CONTROLPLANE_KEEP:-0}" == 1 ]]; then
		echo "kept ${WORK}" >&2
	else
		rm -rf "${WORK}"
	fi
}
trap stop_all EXIT

fail() {
	echo "SMOKE FAILED: $*" >&2
	local f
	for f in "${WORK}"/*.log; do
		echo "--- tail ${f}" >&2
		tail -n 15 "${f}" >&2 || true
	done
	exit 1
}

# wait_for <what> <seconds> <command...>
wait_for() {
	local what="$1" secs="$2" i
	shift 2
	for ((i = 0; i < secs * 10; i++)); do
		if "$@" >/dev/null 2>&1; then
			log "${what} ok"
			return 0
		fi
		sleep 0.1
	done
	fail "${what} not ready after ${secs}s"
}

read -r P_ETCD P_PEER P_METRICS P_API P_KCM P_SCHED < <(python3 -c '
import socket
ss = [socket.socket() for _ in range(6)]
for s in ss: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in ss])
for s in ss: s.close()')

# Credentials: service-account signing key and one admin bearer token
# (group system:masters, so RBAC lets it do everything).
mkdir -p "${WORK}/pki" "${WORK}/etcd"
chmod 700 "${WORK}/etcd"
openssl genrsa -out "${WORK}/pki/sa.key" 2048 2>/dev/null
openssl rsa -in "${WORK}/pki/sa.key" -pubout -out "${WORK}/pki/sa.pub" 2>/dev/null
TOKEN="$(openssl rand -hex 24)"
echo "${TOKEN},admin,admin,system:masters" >"${WORK}/pki/tokens.csv"
KUBECONFIG_FILE="${WORK}/kubeconfig"
cat >"${KUBECONFIG_FILE}" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster: {server: "https://127.0.0.1:${P_API}", insecure-skip-tls-verify: true}
users:
- name: admin
  user: {token: "${TOKEN}"}
contexts:
- name: local
  context: {cluster: local, user: admin}
current-context: local
EOF

api() { curl -sSf -k -H "Authorization: Bearer ${TOKEN}" "$@"; }
API="https://127.0.0.1:${P_API}"

"${BIN}/etcd" --name=cp --data-dir="${WORK}/etcd" \
	--listen-client-urls="http://127.0.0.1:${P_ETCD}" --advertise-client-urls="http://127.0.0.1:${P_ETCD}" \
	--listen-peer-urls="http://127.0.0.1:${P_PEER}" --initial-advertise-peer-urls="http://127.0.0.1:${P_PEER}" \
	--initial-cluster="cp=http://127.0.0.1:${P_PEER}" --listen-metrics-urls="http://127.0.0.1:${P_METRICS}" \
	--unsafe-no-fsync --log-level=warn >"${WORK}/etcd.log" 2>&1 &
PIDS+=($!)
wait_for etcd 30 curl -sf "http://127.0.0.1:${P_ETCD}/health"

"${BIN}/kube-apiserver" --etcd-servers="http://127.0.0.1:${P_ETCD}" \
	--bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="${P_API}" \
	--cert-dir="${WORK}/apiserver" --token-auth-file="${WORK}/pki/tokens.csv" --authorization-mode=RBAC \
	--service-account-issuer=https://kubernetes.default.svc.cluster.local \
	--service-account-key-file="${WORK}/pki/sa.pub" --service-account-signing-key-file="${WORK}/pki/sa.key" \
	--service-cluster-ip-range=10.96.0.0/16 --endpoint-reconciler-type=none >"${WORK}/apiserver.log" 2>&1 &
PIDS+=($!)
wait_for kube-apiserver 60 api "${API}/readyz"

"${BIN}/kube-controller-manager" --kubeconfig="${KUBECONFIG_FILE}" \
	--authentication-kubeconfig="${KUBECONFIG_FILE}" --authorization-kubeconfig="${KUBECONFIG_FILE}" \
	--authentication-skip-lookup=true --bind-address=127.0.0.1 --secure-port="${P_KCM}" \
	--cert-dir="${WORK}/kcm" --leader-elect=false --use-service-account-credentials=true \
	--service-account-private-key-file="${WORK}/pki/sa.key" \
	--root-ca-file="${WORK}/apiserver/apiserver.crt" >"${WORK}/kcm.log" 2>&1 &
PIDS+=($!)
"${BIN}/kube-scheduler" --kubeconfig="${KUBECONFIG_FILE}" \
	--authentication-kubeconfig="${KUBECONFIG_FILE}" --authorization-kubeconfig="${KUBECONFIG_FILE}" \
	--authentication-skip-lookup=true --bind-address=127.0.0.1 --secure-port="${P_SCHED}" \
	--leader-elect=false >"${WORK}/scheduler.log" 2>&1 &
PIDS+=($!)
wait_for kube-controller-manager 60 curl -sfk "https://127.0.0.1:${P_KCM}/healthz"
wait_for kube-scheduler 60 curl -sfk "https://127.0.0.1:${P_SCHED}/healthz"
# The ServiceAccount admission plugin rejects pods until the controller
# manager has created the namespace's "default" service account.
wait_for "default serviceaccount" 60 api "${API}/api/v1/namespaces/default/serviceaccounts/default"

HOME="${WORK}" "${BIN}/kwok" --kubeconfig="${KUBECONFIG_FILE}" --config="${STAGES}" \
	--manage-all-nodes=false --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
	--cidr=10.244.0.0/24 --node-ip=10.245.0.1 --node-lease-duration-seconds=40 \
	>"${WORK}/kwok.log" 2>&1 &
PIDS+=($!)

api -H 'Content-Type: application/json' -X POST "${API}/api/v1/nodes" -d '{
  "apiVersion": "v1", "kind": "Node",
  "metadata": {"name": "kwok-node-0", "annotations": {"kwok.x-k8s.io/node": "fake"},
               "labels": {"type": "kwok", "kubernetes.io/hostname": "kwok-node-0"}},
  "spec": {"taints": [{"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}]},
  "status": {"allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"},
             "capacity": {"cpu": "32", "memory": "256Gi", "pods": "110"}}}' >/dev/null
api -H 'Content-Type: application/json' -X POST "${API}/api/v1/namespaces/default/pods" -d '{
  "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "smoke"},
  "spec": {"nodeSelector": {"type": "kwok"},
           "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}],
           "containers": [{"name": "app", "image": "example.invalid/app:1"}]}}' >/dev/null

node_ready() { api "${API}/api/v1/nodes/kwok-node-0" | tr -d ' \n' | grep -q '"type":"Ready","status":"True"'; }
pod_running() {
	local p
	p="$(api "${API}/api/v1/namespaces/default/pods/smoke" | tr -d ' \n')"
	grep -q '"nodeName":"kwok-node-0"' <<<"${p}" && grep -q '"phase":"Running"' <<<"${p}"
}
wait_for "kwok node Ready" 60 node_ready
wait_for "pod scheduled and Running" 60 pod_running
log "control plane smoke test passed (bin: ${BIN})"
