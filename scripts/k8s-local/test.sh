#!/usr/bin/env bash
# test.sh: `make test-k8s`. notiflow on the local cluster, used the way an
# operator uses it (deploy/k8s/README.md, "Local cluster"):
#
#  1. the cluster: started with `k8s-local.sh up` when it is not running
#     (and stopped with `down` at the end, which fails the test if anything
#     of it is left on the host); when it is running, the images are rebuilt
#     and imported and the cluster is left running
#  2. KEDA's CRDs and `kubectl apply --server-side --dry-run=server -k` of
#     every overlay (smoke.sh overlays), before notiflow is applied
#  3. a fresh namespace: notiflow's is deleted if it exists, the Secret is
#     created with random passwords and token, `kubectl apply -k
#     deploy/k8s/overlays/local`, then every Deployment and StatefulSet
#     rolled out, every pod Ready and the topic Job complete
#  4. through `kubectl port-forward` to the scheduler Service: a benchmark
#     run of K8S_TEST_NOTIFICATIONS (10,000) notifications, lost 0 and
#     duplicates 0
#  5. `kubectl scale deployment/dispatcher --replicas=3`: Kafka's own view
#     of the consumer group (kafka-consumer-groups.sh in the Kafka pod) shows
#     exactly the three dispatcher pods as members; a second run, lost 0,
#     duplicates 0
#  6. a third run, with `kubectl delete pod` of one dispatcher once the run
#     is dispatching: lost 0, duplicates 0
#  7. KEDA's operator and metrics server, built from its Go module
#     (keda.sh), then overlays/local-keda (the prod ScaledObject scaled down
#     to this node: 1..3 replicas): the dispatcher settles at 1; a run of
#     K8S_TEST_KEDA_NOTIFICATIONS (60,000) through a slow provider (sim
#     50 ms) builds lag and KEDA scales the dispatcher out to 3, all three
#     in the group, lost 0 and duplicates 0; after the run KEDA scales it
#     back in to 1 (group of 1), and a fifth run on it: lost 0, duplicates 0
#
# Writes bench/results/k8s-latest.json: the Kubernetes version, the times
# (cluster up, apply to all Ready, KEDA scale-out and scale-in), the
# replicas and group members, each run's report, the overlays' dry runs, and whether the host was clean
# after down. Exit status 1 if any check fails.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
here=$root/scripts/k8s-local
K8S_HOME=${K8S_HOME:-$root/.deps/k8s}
export KUBECONFIG=$K8S_HOME/kubeconfig
ns=notiflow
overlay=$root/deploy/k8s/overlays/local
result=$root/bench/results/k8s-latest.json
N=${K8S_TEST_NOTIFICATIONS:-10000}
RECIPIENTS=${K8S_TEST_RECIPIENTS:-1000}
KEDA_NOTIFICATIONS=${K8S_TEST_KEDA_NOTIFICATIONS:-60000}
KEDA_RECIPIENTS=${K8S_TEST_KEDA_RECIPIENTS:-6000}
export KEDA_VERSION=${KEDA_VERSION:-v2.21.1}
work=$(mktemp -d)
failed=0
started=0
pf=""

say() { printf '[test-k8s %s] %s\n' "$(date +%T)" "$*"; }
fail() {
	say "FAIL: $*"
	failed=1
}
die() {
	say "FAIL: $*"
	exit 1
}
now() { date +%s.%N; }
since() { python3 -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 1))" "$1" "$(now)"; }
# jget FILE EXPR: a value of the JSON document in FILE (EXPR in Python, on d).
jget() { python3 -c "import json, sys; d = json.load(open(sys.argv[1])); print($2)" "$1"; }

finish() {
	local rc=$?
	[[ -z $pf ]] || kill "$pf" 2>/dev/null || true
	if ((started)); then
		if "$root/scripts/k8s-local.sh" down >"$work/down.log" 2>&1; then
			echo true >"$work/host-clean"
		else
			echo false >"$work/host-clean"
			rm -f "$work/passed"
			failed=1
		fi
		sed 's/^/  /' "$work/down.log"
	fi
	write_result || true
	rm -rf "$work"
	if ((rc != 0 || failed)); then
		say "test-k8s failed"
		exit 1
	fi
	say "test-k8s passed ($result)"
}
trap finish EXIT

write_result() {
	mkdir -p "$(dirname "$result")"
	python3 - "$work" "$result" <<'PY'
import json, os, sys
work, out = sys.argv[1], sys.argv[2]
def read(name, default=None):
    p = os.path.join(work, name)
    if not os.path.exists(p):
        return default
    text = open(p).read().strip()
    try:
        return json.loads(text)
    except ValueError:
        return text
runs = []
for name in ("run1", "run2", "run3", "run4", "run5"):
    run = read(name + ".json")
    if run is None:
        continue
    report = run.get("report") or {}
    entry = {"name": name, "id": run.get("id"), "status": run.get("status"),
             "params": run.get("params"), "lost": report.get("lost"),
             "duplicates": report.get("duplicates"), "msgsPerSecond": report.get("msgsPerSecond"),
             "dispatcherReplicas": read(name + ".replicas"), "report": report}
    if name == "run4":
        entry["maxReplicas"] = read("run4.max-replicas")
        entry["scaleOutSec"] = read("run4.scale-out-sec")
        entry["membersAtMax"] = read("run4.members-at-max")
    if name == "run3":
        entry["deletedPod"] = read("run3.victim")
        entry["dispatchedAtDelete"] = read("run3.dispatched-at-delete")
    runs.append(entry)
doc = {
    "kubernetesVersion": read("k8s-version"),
    "clusterStartedByTest": read("started") == 1,
    "clusterUpSec": read("cluster-up-sec"),
    "applyToReadySec": read("ready-sec"),
    "dispatcherReplicasAfterScale": read("scaled-replicas"),
    "groupMembersAfterScale": read("group-members", []),
    "runs": runs,
    "overlaysDryRun": read("overlays", {}),
    "keda": {"version": read("keda-version"), "installSec": read("keda-install-sec"),
             "maxReplicas": read("run4.max-replicas"), "scaleOutSec": read("run4.scale-out-sec"),
             "scaleInSec": read("scale-in-sec"), "membersAtMax": read("run4.members-at-max", [])},
    "hostCleanAfterDown": read("host-clean"),
    "passed": read("passed") == 1,
    "finishedAt": read("finished-at"),
}
json.dump(doc, open(out, "w"), indent=2)
PY
}

# api METHOD PATH [BODY]: the scheduler's API through the port-forward.
api() {
	local args=(-sS --fail-with-body -m 30 -H "Authorization: Bearer $token")
	[[ -z ${3:-} ]] || args+=(-H 'Content-Type: application/json' -d "$3")
	curl "${args[@]}" -X "$1" "http://127.0.0.1:$port$2"
}

# bench NAME [MODE [NOTIFICATIONS RECIPIENTS SIM-LATENCY-MS]]: a benchmark
# run through the admin endpoint (default N, RECIPIENTS, 2 ms), its final
# state in $work/NAME.json. MODE delete: one dispatcher pod is deleted once
# the run is dispatching; MODE keda: the dispatcher's replica count is
# sampled at every poll (the most in $work/NAME.max-replicas, the seconds
# from the start until it reached 3 in $work/NAME.scale-out-sec, the group's
# members then in $work/NAME.members-at-max). Checks lost 0 and duplicates 0.
bench() {
	local name=$1 mode=${2:-} n=${3:-$N} recipients=${4:-$RECIPIENTS} latency=${5:-2}
	local id deadline status dispatched victim start replicas max=0
	kubectl -n $ns get deployment dispatcher -o jsonpath='{.status.readyReplicas}' >"$work/$name.replicas"
	api POST /admin/benchmarks "{\"notifications\":$n,\"recipients\":$recipients,\"channel\":\"sim\",\"sim_latency_ms\":$latency}" >"$work/$name.json" ||
		die "$name: POST /admin/benchmarks: $(cat "$work/$name.json")"
	id=$(jget "$work/$name.json" 'd["id"]')
	start=$(now)
	say "$name: benchmark $id ($n notifications, $recipients recipients, sim $latency ms, $(cat "$work/$name.replicas") dispatchers)"
	deadline=$(($(date +%s) + 600))
	while :; do
		api GET "/admin/benchmarks/$id" >"$work/$name.json" || die "$name: GET /admin/benchmarks/$id: $(cat "$work/$name.json")"
		status=$(jget "$work/$name.json" 'd["status"]')
		[[ $status == done || $status == failed ]] && break
		if [[ $mode == keda ]]; then
			replicas=$(kubectl -n $ns get deployment dispatcher -o jsonpath='{.spec.replicas}')
			if ((replicas > max)); then
				max=$replicas
				echo "$max" >"$work/$name.max-replicas"
				say "$name: KEDA scaled the dispatcher to $max replicas ($(jget "$work/$name.json" 'd["progress"]["dispatched"]') of $n dispatched)"
				if ((max == 3)); then
					since "$start" >"$work/$name.scale-out-sec"
					kubectl -n $ns rollout status deployment/dispatcher --timeout=120s >/dev/null || fail "$name: 3 dispatchers not Ready"
					group_is_pods 60 >"$work/$name.members-at-max" || fail "$name: the group's members are not the 3 dispatcher pods"
				fi
			fi
		fi
		if [[ $mode == delete && ! -f $work/$name.victim ]]; then
			dispatched=$(jget "$work/$name.json" 'd["progress"]["dispatched"]')
			if ((dispatched > 0)); then
				victim=$(kubectl -n $ns get pods -l app.kubernetes.io/name=dispatcher --field-selector=status.phase=Running \
					-o jsonpath='{.items[0].metadata.name}')
				kubectl -n $ns delete pod "$victim" --wait=false >/dev/null
				echo "\"$victim\"" >"$work/$name.victim"
				echo "$dispatched" >"$work/$name.dispatched-at-delete"
				say "$name: deleted pod $victim with $dispatched of $n dispatched"
			fi
		fi
		(($(date +%s) < deadline)) || die "$name: benchmark $id not done after 600 s: $(cat "$work/$name.json")"
		sleep 0.2
	done
	local lost dups rate
	lost=$(jget "$work/$name.json" '(d.get("report") or {}).get("lost")')
	dups=$(jget "$work/$name.json" '(d.get("report") or {}).get("duplicates")')
	rate=$(jget "$work/$name.json" '(d.get("report") or {}).get("msgsPerSecond")')
	say "$name: $status, lost $lost, duplicates $dups, $rate notifications/s"
	[[ $status == done ]] || fail "$name: status $status"
	[[ $lost == 0 ]] || fail "$name: lost $lost"
	[[ $dups == 0 ]] || fail "$name: duplicates $dups"
	if [[ $mode == delete ]]; then
		[[ -f $work/$name.victim ]] || fail "$name: no dispatcher pod was deleted during the run"
		[[ ! -f $work/$name.victim ]] || (($(cat "$work/$name.dispatched-at-delete") < n)) ||
			fail "$name: the pod was deleted after every notification was dispatched"
	fi
}

# group_members: the client ids of the dispatcher group's members, by
# Kafka's own kafka-consumer-groups.sh, one a line.
group_members() {
	kubectl -n $ns exec kafka-0 -- kafka-consumer-groups.sh --bootstrap-server localhost:9092 \
		--describe --group notiflow-dispatcher --members 2>/dev/null |
		awk 'NR > 1 && $1 == "notiflow-dispatcher" { for (i = 2; i <= NF; i++) if ($i ~ /^notiflow@/) { print $i; break } }' | sort -u
}

# delete_namespace: notiflow's namespace and all in it, if it exists, pods
# killed at once (an earlier run's or the dry run's).
delete_namespace() {
	kubectl get namespace $ns >/dev/null 2>&1 || return 0
	say "deleting the namespace $ns"
	kubectl delete namespace $ns --wait=false >/dev/null 2>&1 || true
	kubectl -n $ns delete pods --all --grace-period=0 --force >/dev/null 2>&1 || true
	kubectl wait --for=delete namespace/$ns --timeout=180s >/dev/null 2>&1 || die "namespace $ns not deleted in 180 s"
}

# dispatcher_pods: the names of the dispatcher pods not being deleted, one a
# line, sorted.
dispatcher_pods() {
	kubectl -n $ns get pods -l app.kubernetes.io/name=dispatcher -o json |
		python3 -c 'import json, sys; print("\n".join(sorted(p["metadata"]["name"] for p in json.load(sys.stdin)["items"] if not p["metadata"].get("deletionTimestamp"))))'
}

# group_is_pods SECONDS: waits until the members of the dispatcher group are
# exactly the dispatcher pods; prints them as a JSON list. Fails after
# SECONDS.
group_is_pods() {
	local deadline=$(($(date +%s) + $1)) pods members
	while :; do
		pods=$(dispatcher_pods)
		members=$(group_members | sed 's/^notiflow@\([^ ]*\).*/\1/' | sort -u)
		[[ -n $pods && $members == "$pods" ]] && break
		(($(date +%s) < deadline)) || { say "group members [$(tr '\n' ' ' <<<"$members")] are not the dispatcher pods [$(tr '\n' ' ' <<<"$pods")]"; return 1; }
		sleep 2
	done
	python3 -c 'import json, sys; print(json.dumps(sys.argv[1].split()))' "$members"
}

# 1. The cluster.
t=$(now)
if kubectl get --raw /readyz >/dev/null 2>&1; then
	say "1. the local cluster is running: rebuilding and importing the images"
	"$root/scripts/k8s-local.sh" images
	echo 0 >"$work/started"
else
	say "1. starting the local cluster (make k8s-up)"
	started=1
	echo 1 >"$work/started"
	"$root/scripts/k8s-local.sh" up
	since "$t" >"$work/cluster-up-sec"
fi
kubectl version -o json | jget /dev/stdin '"\"" + d["serverVersion"]["gitVersion"] + "\""' >"$work/k8s-version"

# 2. KEDA's CRDs and every overlay, server-side, before anything of
# notiflow is applied: a dry run of another overlay over a live install
# would meet the topic Job's immutable template, not the manifests' errors.
delete_namespace
say "2. KEDA CRDs and the overlays, server-side dry run"
if "$here/smoke.sh" overlays >"$work/overlays.log" 2>&1; then :; else fail "overlay dry runs"; fi
sed 's/^/  /' "$work/overlays.log"
sed -n 's/.*\] overlay \([a-z-]*\): pass .*/\1 pass/p; s/.*FAIL: overlay \([a-z-]*\):.*/\1 fail/p' "$work/overlays.log" |
	python3 -c 'import json, sys; print(json.dumps({k: v == "pass" for k, v in (l.split() for l in sys.stdin)}))' >"$work/overlays"

# 3. A fresh namespace, the Secret, the apply.
delete_namespace
say "3. kubectl apply -k deploy/k8s/overlays/local"
token=$(openssl rand -hex 32)
db_password=$(openssl rand -hex 16)
kubectl kustomize "$overlay" | awk 'BEGIN { RS = "\n---\n" } /(^|\n)kind: Namespace\n/ { print }' | kubectl apply -f - >/dev/null
kubectl -n $ns create secret generic notiflow-secrets \
	--from-literal=api-token="$token" \
	--from-literal=mysql-dsn="notiflow:$db_password@tcp(mysql:3306)/notiflow?parseTime=true&loc=UTC" \
	--from-literal=mysql-password="$db_password" \
	--from-literal=redis-password="$(openssl rand -hex 16)" >/dev/null
t=$(now)
kubectl apply -k "$overlay" >/dev/null
for w in statefulset/kafka statefulset/mysql statefulset/redis deployment/scheduler deployment/dispatcher deployment/sink; do
	kubectl -n $ns rollout status "$w" --timeout=300s >/dev/null || {
		kubectl -n $ns get pods -o wide
		die "$w not rolled out in 300 s"
	}
done
kubectl -n $ns wait --for=condition=Complete job/notiflow-topics --timeout=300s >/dev/null ||
	die "the topic Job did not complete: $(kubectl -n $ns logs job/notiflow-topics 2>&1 | tail -5)"
kubectl -n $ns wait --for=condition=Ready pods -l 'app.kubernetes.io/name notin (notiflow-topics)' --timeout=120s >/dev/null ||
	die "pods not Ready"
since "$t" >"$work/ready-sec"
say "3. every pod Ready $(cat "$work/ready-sec") s after the apply"
kubectl -n $ns get pods -o wide

# 4. The first run, through a port-forward to the scheduler Service.
kubectl -n $ns port-forward svc/scheduler :8080 >"$work/pf.log" 2>&1 &
pf=$!
deadline=$(($(date +%s) + 30))
until port=$(sed -n 's/^Forwarding from 127\.0\.0\.1:\([0-9]*\) .*/\1/p' "$work/pf.log" | head -1) && [[ -n $port ]]; do
	(($(date +%s) < deadline)) || die "kubectl port-forward did not start: $(cat "$work/pf.log")"
	sleep 0.2
done
say "4. port-forward svc/scheduler on 127.0.0.1:$port"
bench run1

# 5. Three dispatchers, all in the group, and a second run.
say "5. kubectl scale deployment/dispatcher --replicas=3"
kubectl -n $ns scale deployment/dispatcher --replicas=3 >/dev/null
kubectl -n $ns rollout status deployment/dispatcher --timeout=180s >/dev/null || die "dispatchers not rolled out"
group_is_pods 120 >"$work/group-members" || fail "the group's members are not the 3 dispatcher pods"
kubectl -n $ns get deployment dispatcher -o jsonpath='{.status.readyReplicas}' >"$work/scaled-replicas"
say "5. group notiflow-dispatcher members: $(jget "$work/group-members" '" ".join(d)')"
[[ $(cat "$work/scaled-replicas") == 3 ]] || fail "$(cat "$work/scaled-replicas") dispatchers Ready after the scale, not 3"
bench run2

# 6. A dispatcher pod deleted during the third run.
say "6. kubectl delete pod of a dispatcher during a run"
bench run3 delete

# 7. KEDA: its operator in the cluster scales the dispatcher on lag.
say "7. KEDA $KEDA_VERSION: the operator and metrics server from its Go module"
t=$(now)
"$here/keda.sh" build
"$here/keda.sh" install
since "$t" >"$work/keda-install-sec"
say "7. kubectl apply -k deploy/k8s/overlays/local-keda (ScaledObject: 1..3 replicas, lag threshold 2,000)"
kubectl apply -k "$root/deploy/k8s/overlays/local-keda" >/dev/null
kubectl -n $ns wait --for=condition=Ready scaledobject/dispatcher --timeout=120s >/dev/null ||
	die "ScaledObject not Ready: $(kubectl -n $ns get scaledobject dispatcher -o jsonpath='{.status.conditions}')"
deadline=$(($(date +%s) + 180))
until [[ $(kubectl -n $ns get deployment dispatcher -o jsonpath='{.spec.replicas}') == 1 ]] &&
	[[ $(dispatcher_pods | wc -l) == 1 ]] && group_is_pods 0 >/dev/null 2>&1; do
	(($(date +%s) < deadline)) || die "the dispatcher did not settle at KEDA's minimum of 1 replica in 180 s"
	sleep 2
done
say "7. the dispatcher at 1 replica (KEDA's minimum, no lag); a run with a slow provider (sim 50 ms) builds lag"
bench run4 keda "$KEDA_NOTIFICATIONS" "$KEDA_RECIPIENTS" 50
[[ $(cat "$work/run4.max-replicas" 2>/dev/null) == 3 ]] || fail "run4: KEDA scaled the dispatcher to $(cat "$work/run4.max-replicas" 2>/dev/null || echo 1) replicas, not 3"
[[ $(jget "$work/run4.members-at-max" 'len(d)' 2>/dev/null) == 3 ]] || fail "run4: the group did not have 3 members at 3 replicas"
t=$(now)
deadline=$(($(date +%s) + 300))
until [[ $(kubectl -n $ns get deployment dispatcher -o jsonpath='{.spec.replicas}') == 1 ]] &&
	[[ $(dispatcher_pods | wc -l) == 1 ]] && group_is_pods 0 >/dev/null 2>&1; do
	(($(date +%s) < deadline)) || { fail "KEDA did not scale the dispatcher back to 1 in 300 s after the lag drained"; break; }
	sleep 2
done
since "$t" >"$work/scale-in-sec"
say "7. scaled back in to $(kubectl -n $ns get deployment dispatcher -o jsonpath='{.spec.replicas}') replica $(cat "$work/scale-in-sec") s after the run"
bench run5
echo "\"$KEDA_VERSION\"" >"$work/keda-version"

date -u +'"%Y-%m-%dT%H:%M:%SZ"' >"$work/finished-at"
((failed)) || echo 1 >"$work/passed"
