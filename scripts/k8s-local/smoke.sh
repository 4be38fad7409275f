#!/usr/bin/env bash
# smoke.sh: checks the running local cluster (make k8s-up) the way a user's
# cluster would be used. Called by `make k8s-smoke`; prints what it checks.
#
#  1. A Deployment of the dispatcher image (imagePullPolicy: Never, the
#     restricted Pod Security Standard, read-only root filesystem) in a
#     namespace of its own: its pod is scheduled, gets an address on the
#     pod bridge, starts the image's static binary as UID 65532 and becomes
#     Ready, and the binary's own log line shows it running (it waits for
#     Kafka, which this namespace does not have: the Deployment has no
#     readiness probe, so Ready means "the container runs"). The namespace
#     is deleted after step 2.
#  2. From a pod of the same image, GET /readyz of the API server at
#     https://kubernetes.default.svc.cluster.local, verified with the
#     cluster CA (cluster DNS, the Service path, the API server on the
#     node address); and kube-proxy: from the host, a DNS query to the kube-dns Service's
#     ClusterIP is answered (by CoreDNS, through kube-proxy's rules).
#  3. KEDA's CRDs (config/crd/bases of the KEDA Go module, applied
#     server-side), then `kubectl apply --server-side --dry-run=server -k`
#     of every overlay in deploy/k8s/overlays: each passes or fails with the
#     API server's reason. Exit status 1 if any check fails.
#
# `smoke.sh overlays` runs step 3 alone (make test-k8s uses it).
set -uo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
K8S_HOME=${K8S_HOME:-$root/.deps/k8s}
export KUBECONFIG=$K8S_HOME/kubeconfig
KEDA_VERSION=${KEDA_VERSION:-v2.21.1}
ns=notiflow-smoke
failed=0

say() { printf '[k8s-smoke %s] %s\n' "$(date +%T)" "$*"; }
fail() {
	say "FAIL: $*"
	failed=1
}

kubectl get --raw /readyz >/dev/null 2>&1 || { say "the local cluster is not up (make k8s-up)"; exit 1; }

deployment() {
	cat <<YAML
apiVersion: v1
kind: Namespace
metadata:
  name: $ns
  labels:
    pod-security.kubernetes.io/enforce: restricted
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: dispatcher
  namespace: $ns
spec:
  replicas: 1
  selector:
    matchLabels: {app: dispatcher}
  template:
    metadata:
      labels: {app: dispatcher}
    spec:
      automountServiceAccountToken: false
      securityContext:
        runAsNonRoot: true
        seccompProfile: {type: RuntimeDefault}
      containers:
        - name: dispatcher
          image: notiflow/dispatcher:dev
          imagePullPolicy: Never
          env:
            - {name: NOTIFLOW_KAFKA_BROKERS, value: "kafka.$ns.svc.cluster.local:9092"}
            - {name: NOTIFLOW_REDIS_ADDR, value: "redis:6379"}
          securityContext:
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            capabilities: {drop: [ALL]}
          resources:
            requests: {cpu: 10m, memory: 32Mi}
            limits: {memory: 128Mi}
YAML
}

only=${1:-all}
[[ $only == all || $only == overlays ]] || { say "usage: $0 [overlays]"; exit 2; }

if [[ $only == all ]]; then
start=$(date +%s)
say "1. Deployment $ns/dispatcher (image notiflow/dispatcher:dev, imagePullPolicy Never)"
if deployment | kubectl apply -f - >/dev/null &&
	kubectl -n $ns rollout status deployment/dispatcher --timeout=120s >/dev/null; then
	pod=$(kubectl -n $ns get pods -l app=dispatcher -o jsonpath='{.items[0].metadata.name}')
	kubectl -n $ns get pod "$pod" -o wide
	# The UID the container's process runs as, read on the host: the task's
	# pid from the node's containerd, its Uid line from /proc.
	cid=$(kubectl -n $ns get pod "$pod" -o jsonpath='{.status.containerStatuses[0].containerID}')
	tpid=$(ctr --address "$K8S_HOME/run/containerd/containerd.sock" -n k8s.io tasks ls 2>/dev/null |
		awk -v id="${cid#containerd://}" '$1 == id {print $2}')
	uid=$(awk '/^Uid:/ {print $2}' "/proc/${tpid:-0}/status" 2>/dev/null || true)
	ip=$(kubectl -n $ns get pod "$pod" -o jsonpath='{.status.podIP}')
	[[ $ip == 10.244.0.* ]] || fail "pod address $ip is not on the pod bridge"
	[[ $uid == 65532 ]] || fail "container runs as UID ${uid:-unknown (task of $cid not found)}, not 65532"
	deadline=$(($(date +%s) + 60))
	# Not a pipeline: grep -q stopping at the match would end kubectl with
	# SIGPIPE on a long log, and pipefail would fail the test.
	until grep -q '"level"' < <(kubectl -n $ns logs "$pod" 2>/dev/null); do
		(($(date +%s) < deadline)) || { fail "no log line from the dispatcher binary in 60 s"; break; }
		sleep 1
	done
	say "the dispatcher's first log line: $(kubectl -n $ns logs "$pod" 2>/dev/null | head -1 | cut -c1-160)…"
	say "Ready in $(($(date +%s) - start)) s"
else
	fail "Deployment $ns/dispatcher not Ready in 120 s"
	kubectl -n $ns get pods -o wide
	kubectl -n $ns describe pods | tail -20
fi
say "2. a pod reaches the API server by the kubernetes Service's name"
# The image's healthcheck binary GETs /readyz (open to anonymous users) at
# kubernetes.default.svc.cluster.local, verifying the server's certificate
# against the cluster CA of the pod's service-account volume (Go reads
# SSL_CERT_FILE): cluster DNS, kube-proxy's Service rules, the pod's route
# to the Service range and the API server on the node address together.
kubectl -n $ns apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: api
spec:
  restartPolicy: Never
  automountServiceAccountToken: true
  securityContext:
    runAsNonRoot: true
    seccompProfile: {type: RuntimeDefault}
  containers:
    - name: api
      image: notiflow/dispatcher:dev
      imagePullPolicy: Never
      command: [/usr/local/bin/healthcheck, -timeout, 5s, "https://kubernetes.default.svc.cluster.local/readyz"]
      env:
        - {name: SSL_CERT_FILE, value: /var/run/secrets/kubernetes.io/serviceaccount/ca.crt}
      securityContext:
        allowPrivilegeEscalation: false
        readOnlyRootFilesystem: true
        capabilities: {drop: [ALL]}
YAML
deadline=$(($(date +%s) + 60))
until [[ $(kubectl -n $ns get pod api -o jsonpath='{.status.phase}' 2>/dev/null) =~ ^(Succeeded|Failed)$ ]]; do
	(($(date +%s) < deadline)) || break
	sleep 1
done
phase=$(kubectl -n $ns get pod api -o jsonpath='{.status.phase}' 2>/dev/null)
if [[ $phase == Succeeded ]]; then
	say "GET https://kubernetes.default.svc.cluster.local/readyz from a pod: ok"
else
	fail "GET https://kubernetes.default.svc.cluster.local/readyz from a pod: phase $phase: $(kubectl -n $ns logs api 2>&1)"
fi

# kube-proxy: the host asks the kube-dns Service's ClusterIP (its endpoint
# is CoreDNS on the node address) over TCP, through the DNAT rules kube-proxy
# made, for kubernetes.default's address. (A bare TCP connect proves
# nothing: some hosts' networks accept any outgoing connection.)
cluster_ip=$(kubectl -n default get service kubernetes -o jsonpath='{.spec.clusterIP}')
dns_ip=$(kubectl -n kube-system get service kube-dns -o jsonpath='{.spec.clusterIP}')
answer=$(python3 - "$dns_ip" kubernetes.default.svc.cluster.local 2>&1 <<'PY'
import socket, struct, sys
server, name = sys.argv[1], sys.argv[2]
query = struct.pack(">HHHHHH", 0x4b38, 0x0100, 1, 0, 0, 0)
query += b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"
query += struct.pack(">HH", 1, 1)  # type A, class IN
conn = socket.create_connection((server, 53), timeout=5)
conn.sendall(struct.pack(">H", len(query)) + query)
def read(n):
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise SystemExit("connection closed")
        data += chunk
    return data
reply = read(struct.unpack(">H", read(2))[0])
answers = struct.unpack(">H", reply[6:8])[0]
# One A record answers: its address is the reply's last four bytes.
print(socket.inet_ntoa(reply[-4:]) if answers == 1 else "answers: %d" % answers)
PY
)
if [[ $answer == "$cluster_ip" ]]; then
	say "kube-proxy: Service kube-system/kube-dns at $dns_ip:53 answers from the host: kubernetes.default is $answer"
else
	fail "kube-proxy: Service kube-system/kube-dns at $dns_ip:53 from the host: $answer"
fi

kubectl delete namespace $ns --wait=true --timeout=120s >/dev/null || fail "namespace $ns not deleted"
fi

say "3. KEDA $KEDA_VERSION CRDs (server-side)"
# The module's zip is fetched even though its go.mod asks for a newer Go
# than the machine's (go mod download then reports an error beside the
# zip's path); only the CRD files are taken out of it.
zip=$(GOWORK=off GOTOOLCHAIN=local go mod download -json "github.com/kedacore/keda/v2@$KEDA_VERSION" |
	sed -n 's/^\t"Zip": "\(.*\)",$/\1/p')
keda_dir=$K8S_HOME/keda/$KEDA_VERSION
if [[ -f $zip && ! -d $keda_dir/config/crd/bases ]]; then
	mkdir -p "$keda_dir/config/crd/bases"
	unzip -q -o -j "$zip" "github.com/kedacore/keda/v2@$KEDA_VERSION/config/crd/bases/*.yaml" \
		-d "$keda_dir/config/crd/bases"
fi
if [[ -d $keda_dir/config/crd/bases ]] &&
	kubectl apply --server-side -f "$keda_dir/config/crd/bases" >/dev/null; then
	for crd in $(kubectl get crd -o name | grep 'keda.sh$'); do
		deadline=$(($(date +%s) + 60))
		until kubectl wait --for=condition=Established "$crd" --timeout=10s >/dev/null 2>&1; do
			(($(date +%s) < deadline)) || { fail "$crd not Established"; break; }
			sleep 1
		done
	done
	say "KEDA CRDs: $(kubectl get crd -o name | grep -c 'keda.sh$') Established"
else
	fail "KEDA CRDs from $keda_dir/config/crd/bases not applied"
fi

say "4. kubectl apply --server-side --dry-run=server -k of every overlay"
# A dry run creates nothing, so the namespaced objects of an overlay would
# fail on its missing Namespace: the overlays' Namespaces are created for
# real first (and those that did not exist before are deleted at the end).
existing=$(kubectl get namespaces -o name)
created=()
for overlay in "$root"/deploy/k8s/overlays/*/; do
	for n in $(kubectl kustomize "$overlay" | awk 'BEGIN { RS = "\n---\n" } /(^|\n)kind: Namespace\n/ { print "---"; print }' |
		kubectl apply --server-side -f - -o name); do
		grep -qx "$n" <<<"$existing" || created+=("$n")
	done
done
for overlay in "$root"/deploy/k8s/overlays/*/; do
	name=$(basename "$overlay")
	# --force-conflicts: what is checked is whether the API server accepts
	# the objects (schema, admission, Pod Security), not which field manager
	# owns fields already set by an earlier apply or a kubectl scale.
	if out=$(kubectl apply --server-side --force-conflicts --dry-run=server -k "$overlay" 2>&1); then
		say "overlay $name: pass ($(grep -c 'serverside-applied' <<<"$out") objects)"
	else
		fail "overlay $name: $(grep -v -e 'serverside-applied' -e '^Warning: ' <<<"$out" | head -5)"
	fi
done
for n in $( ((${#created[@]})) && printf '%s\n' "${created[@]}" | sort -u); do kubectl delete "$n" --wait=false >/dev/null; done
((failed == 0)) && say "all checks passed" || say "some checks failed"
exit $failed
