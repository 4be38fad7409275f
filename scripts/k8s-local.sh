#!/usr/bin/env bash
# k8s-local.sh: a single-node Kubernetes on this machine, for trying the
# manifests in deploy/k8s against a real API server and kubelet.
#
#   scripts/k8s-local.sh up      build what is missing (cached), start everything
#   scripts/k8s-local.sh down    stop everything by pid, undo every host change
#   scripts/k8s-local.sh status  each component, the node, the imported images
#   scripts/k8s-local.sh check-down  what of the cluster is left on the host
#                                    (down ends with it; fails if anything is)
#   scripts/k8s-local.sh images  (re)build the service images and import them
#
# Everything lives under $K8S_HOME (default .deps/k8s, git-ignored): binaries,
# certificates, kubeconfig (.deps/k8s/kubeconfig), logs, pids and the state of
# etcd, containerd and kubelet. Needs root (bridge, mounts, containerd).
#
# Network: etcd and the control-plane components listen on 127.0.0.1, the
# API server on the node address (pods reach it through the kubernetes
# Service, as in any cluster); the node's address is 10.244.0.1 on a bridge this script
# creates (k8slocal0), which pods share (10.244.0.0/24); cluster DNS
# (CoreDNS) answers on 10.244.0.1:53. Pods route the Service range
# (10.96.0.0/16) to the node address, where kube-proxy's rules translate it;
# IPv4 forwarding is switched on for the bridge alone (a setting that goes
# with the bridge at down), so the host forwards nothing else. No route to
# the pod subnet anywhere else: pods reach each other, the node address and
# Services only.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
K8S_HOME=${K8S_HOME:-$root/.deps/k8s}
# The physical path: /proc/self/mounts names mounts by it (.deps may be a symlink).
mkdir -p "$K8S_HOME"
K8S_HOME=$(realpath "$K8S_HOME")
export K8S_HOME K8S_VERSION=${K8S_VERSION:-v1.35.4}
here=$root/scripts/k8s-local
bin=$K8S_HOME/bin
run=$K8S_HOME/run
pki=$K8S_HOME/pki
pids=$K8S_HOME/pids
logs=$K8S_HOME/logs
export KUBECONFIG=$K8S_HOME/kubeconfig

NODE=k8s-local
BRIDGE=k8slocal0
NODE_IP=10.244.0.1
POD_CIDR=10.244.0.0/24
SERVICE_CIDR=10.96.0.0/16
API_PORT=16443
API_URL=https://$NODE_IP:$API_PORT
ETCD_PORT=12379
SOCK=$run/containerd/containerd.sock
# Settings kubelet (and kube-proxy) may change on the host: recorded before
# start, restored after start and at down.
SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
	kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.ipv4.conf.all.route_localnet net.netfilter.nf_conntrack_max
	net.netfilter.nf_conntrack_tcp_timeout_established
	net.netfilter.nf_conntrack_tcp_timeout_close_wait)
# Fixed host paths kubelet, containerd and the CNI plugins use whatever
# their configuration says; down removes those that did not exist at up.
HOST_PATHS=(/var/lib/kubelet /var/log/containers /var/lib/cni /run/containerd /var/log/pods)
# Control-plane components, in start order; down stops them in reverse.
CONTROL=(etcd kube-apiserver kube-controller-manager kube-scheduler)
NODE_PROCS=(containerd kubelet kube-proxy coredns)

log() { printf '[k8s-local %s] %s\n' "$(date +%T)" "$*"; }
die() {
	log "error: $*" >&2
	exit 1
}
elapsed() { echo $(($(date +%s) - t0)); }

# wait_for SECONDS WHAT CMD...: run CMD every 0.5 s until it succeeds.
wait_for() {
	local secs=$1 what=$2 deadline
	shift 2
	deadline=$(($(date +%s) + secs))
	until "$@" >/dev/null 2>&1; do
		(($(date +%s) < deadline)) || die "$what not ready after ${secs}s (logs: $logs)"
		sleep 0.5
	done
}

pid_of() { cat "$pids/$1.pid" 2>/dev/null || true; }
# is_proc NAME PID: PID runs the program NAME (the base name of its first
# argument), so a recorded pid that the kernel has since given to another
# program is never taken for ours.
is_proc() {
	local argv0
	[[ -n $2 && -r /proc/$2/cmdline ]] || return 1
	IFS= read -r -d '' argv0 <"/proc/$2/cmdline" 2>/dev/null || return 1
	[[ ${argv0##*/} == "$1" ]]
}
alive() { is_proc "$1" "$(pid_of "$1")"; }

# start NAME CMD...: start CMD in the background, logging to $logs/NAME.log.
start() {
	local name=$1
	shift
	alive "$name" && die "$name already running (pid $(pid_of "$name")); run down first"
	nohup "$@" >"$logs/$name.log" 2>&1 &
	echo $! >"$pids/$name.pid"
}

# stop NAME: TERM the recorded pid, KILL it after 15 s.
stop() {
	local name=$1 p i
	p=$(pid_of "$name")
	rm -f "$pids/$name.pid"
	is_proc "$name" "$p" || return 0
	kill "$p" 2>/dev/null || true
	for ((i = 0; i < 60; i++)); do
		is_proc "$name" "$p" || break
		sleep 0.25
	done
	if is_proc "$name" "$p"; then kill -KILL "$p" 2>/dev/null || true; fi
	log "stopped $name (pid $p)"
}

install_packages() {
	local missing=() policy=/usr/sbin/policy-rc.d made_policy=0 rc=0
	command -v containerd >/dev/null || missing+=(containerd)
	command -v runc >/dev/null || missing+=(runc)
	[[ -x /usr/lib/cni/bridge ]] || missing+=(containernetworking-plugins)
	command -v etcd >/dev/null || missing+=(etcd-server)
	command -v iptables >/dev/null || missing+=(iptables)
	command -v nft >/dev/null || missing+=(nftables)
	command -v unzip >/dev/null || missing+=(unzip)
	# images.sh builds the dependency images from the host's MariaDB and
	# Redis files.
	[[ -x /usr/sbin/mariadbd ]] || missing+=(mariadb-server)
	[[ -x /usr/bin/redis-server ]] || missing+=(redis-server)
	((${#missing[@]})) || return 0
	log "apt-get install ${missing[*]} (log: $logs/apt.log)"
	# policy-rc.d keeps the packages' services from starting on install.
	if [[ ! -e $policy ]]; then
		printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && made_policy=1
	fi
	local apt=(apt-get -o DPkg::Lock::Timeout=900 -y -q)
	DEBIAN_FRONTEND=noninteractive "${apt[@]}" install --no-install-recommends "${missing[@]}" >>"$logs/apt.log" 2>&1 ||
		{ "${apt[@]}" update >>"$logs/apt.log" 2>&1 &&
			DEBIAN_FRONTEND=noninteractive "${apt[@]}" install --no-install-recommends "${missing[@]}" >>"$logs/apt.log" 2>&1; } || rc=$?
	((made_policy)) && rm -f "$policy"
	((rc == 0)) || die "apt-get install ${missing[*]} failed (see $logs/apt.log)"
}

# render TEMPLATE OUT: copy a template of scripts/k8s-local, expanding
# @K8S_HOME@, @NODE_IP@, @BRIDGE@, @POD_CIDR@, @SERVICE_CIDR@ and @NODE@.
render() {
	sed -e "s|@K8S_HOME@|$K8S_HOME|g" -e "s|@NODE_IP@|$NODE_IP|g" -e "s|@BRIDGE@|$BRIDGE|g" \
		-e "s|@POD_CIDR@|$POD_CIDR|g" -e "s|@SERVICE_CIDR@|$SERVICE_CIDR|g" -e "s|@NODE@|$NODE|g" "$here/$1" >"$2"
}

prepare() {
	mkdir -p "$bin" "$pids" "$logs"
	command -v kubectl >/dev/null || die "kubectl not found on the PATH (1.32 or newer)"
	install_packages
	"$here/build.sh"
	NODE=$NODE NODE_IP=$NODE_IP API_URL=$API_URL "$here/pki.sh"
	"$here/images.sh" build
}

# make_bridge: the pods' bridge with the node address, on which the API
# server listens too; IPv4 forwarding on it alone (packets from pods to a
# Service's pods are routed through the node).
make_bridge() {
	if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
		ip link add "$BRIDGE" type bridge
		ip addr add "$NODE_IP/24" dev "$BRIDGE"
		ip link set "$BRIDGE" up
	fi
	sysctl -q -w "net.ipv4.conf.$BRIDGE.forwarding=1"
}

start_control_plane() {
	mkdir -p "$run/etcd"
	start etcd etcd --name "$NODE" --data-dir "$run/etcd" \
		--listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
		--listen-peer-urls http://127.0.0.1:12380 --initial-advertise-peer-urls http://127.0.0.1:12380 \
		--initial-cluster "$NODE=http://127.0.0.1:12380" --listen-metrics-urls http://127.0.0.1:12381
	wait_for 30 etcd curl -sf "http://127.0.0.1:$ETCD_PORT/health"
	start kube-apiserver "$bin/kube-apiserver" --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
		--bind-address=$NODE_IP --secure-port=$API_PORT --advertise-address=$NODE_IP \
		--tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" \
		--client-ca-file="$pki/ca.crt" \
		--service-account-key-file="$pki/sa.pub" --service-account-signing-key-file="$pki/sa.key" \
		--service-account-issuer=https://kubernetes.default.svc.cluster.local \
		--service-cluster-ip-range=$SERVICE_CIDR \
		--authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
		--kubelet-client-certificate="$pki/apiserver-kubelet-client.crt" \
		--kubelet-client-key="$pki/apiserver-kubelet-client.key" \
		--kubelet-preferred-address-types=InternalIP --allow-privileged=true --profiling=false \
		--requestheader-client-ca-file="$pki/front-proxy-ca.crt" --requestheader-allowed-names=front-proxy-client \
		--requestheader-username-headers=X-Remote-User --requestheader-group-headers=X-Remote-Group \
		--requestheader-extra-headers-prefix=X-Remote-Extra- \
		--proxy-client-cert-file="$pki/front-proxy-client.crt" --proxy-client-key-file="$pki/front-proxy-client.key" \
		--enable-aggregator-routing=true
	wait_for 60 kube-apiserver kubectl get --raw /readyz
	log "API server ready at $API_URL ($(elapsed) s)"
	start kube-controller-manager "$bin/kube-controller-manager" --kubeconfig="$pki/controller-manager.kubeconfig" \
		--authentication-kubeconfig="$pki/controller-manager.kubeconfig" \
		--authorization-kubeconfig="$pki/controller-manager.kubeconfig" \
		--bind-address=127.0.0.1 --secure-port=10257 --leader-elect=false \
		--service-account-private-key-file="$pki/sa.key" --root-ca-file="$pki/ca.crt" \
		--cluster-signing-cert-file="$pki/ca.crt" --cluster-signing-key-file="$pki/ca.key" \
		--use-service-account-credentials=true --allocate-node-cidrs=false
	start kube-scheduler "$bin/kube-scheduler" --kubeconfig="$pki/scheduler.kubeconfig" \
		--authentication-kubeconfig="$pki/scheduler.kubeconfig" \
		--authorization-kubeconfig="$pki/scheduler.kubeconfig" \
		--bind-address=127.0.0.1 --secure-port=10259 --leader-elect=false
}

record_host_state() {
	local s p
	: >"$run/sysctl.before"
	for s in "${SYSCTLS[@]}"; do
		if sysctl -n "$s" >/dev/null 2>&1; then echo "$s=$(sysctl -n "$s")" >>"$run/sysctl.before"; fi
	done
	nft list tables >"$run/nft-tables.before" 2>/dev/null || true
	: >"$run/host-paths.created"
	for p in "${HOST_PATHS[@]}"; do [[ -e $p ]] || echo "$p" >>"$run/host-paths.created"; done
	kubepods_cgroups >"$run/cgroups.before"
}

# kubepods_cgroups: the kubepods cgroups on the host (cgroupfs driver: one
# per hierarchy on cgroup v1, one on v2), one a line.
kubepods_cgroups() { find /sys/fs/cgroup -maxdepth 2 -type d -name kubepods 2>/dev/null | sort || true; }

restore_sysctls() {
	local line
	[[ -f $run/sysctl.before ]] || return 0
	while IFS= read -r line; do
		[[ $(sysctl -n "${line%%=*}" 2>/dev/null) == "${line#*=}" ]] ||
			sysctl -q -w "$line" >/dev/null || log "could not restore $line"
	done <"$run/sysctl.before"
}

start_node() {
	local s
	mkdir -p "$run/containerd" "$run/kubelet" "$run/cni/net.d" "$run/pod-logs"
	render containerd.toml "$run/containerd/config.toml"
	render cni.conflist "$run/cni/net.d/10-$BRIDGE.conflist"
	render kubelet.yaml "$run/kubelet/config.yaml"
	render kube-proxy.yaml "$run/kube-proxy.yaml"
	start containerd containerd --config "$run/containerd/config.toml"
	wait_for 30 containerd ctr --address "$SOCK" version
	"$here/images.sh" import
	start kubelet "$bin/kubelet" --config="$run/kubelet/config.yaml" --kubeconfig="$pki/kubelet.kubeconfig" \
		--root-dir="$run/kubelet" --cert-dir="$run/kubelet/pki" --hostname-override=$NODE --node-ip=$NODE_IP --v=1
	start kube-proxy "$bin/kube-proxy" --config="$run/kube-proxy.yaml"
	# Cluster DNS: CoreDNS as a node process on the bridge address (pods
	# reach it directly; kubelet's clusterDNS), reading Services with a
	# client certificate of its own.
	kubectl apply --server-side -f "$here/coredns-rbac.yaml" >/dev/null
	render corefile "$run/Corefile"
	start coredns "$bin/coredns" -conf "$run/Corefile"
	wait_for 60 coredns curl -sf http://127.0.0.1:18181/ready
	render kube-dns.yaml "$run/kube-dns.yaml"
	kubectl apply --server-side -f "$run/kube-dns.yaml" >/dev/null
	wait_for 120 "node $NODE" kubectl wait --for=condition=Ready "node/$NODE" --timeout=5s
	# kubelet writes its sysctls at start; put the host's values back.
	restore_sysctls
	log "node $NODE Ready ($(elapsed) s)"
}

cmd_up() {
	local c
	[[ $(id -u) -eq 0 ]] || die "needs root"
	t0=$(date +%s)
	prepare
	log "binaries, certificates and images ready ($(elapsed) s)"
	if alive kube-apiserver; then die "already up (make k8s-status); run make k8s-down first"; fi
	# A half-failed up leaves processes or the bridge: its record of the
	# host's state (under $run) is what down restores, so keep it.
	for c in "${CONTROL[@]}" "${NODE_PROCS[@]}"; do
		alive "$c" && die "$c of an earlier cluster is still running: run make k8s-down first"
	done
	if ip link show "$BRIDGE" >/dev/null 2>&1; then die "bridge $BRIDGE of an earlier cluster exists: run make k8s-down first"; fi
	if awk -v r="$K8S_HOME/" 'index($2, r) == 1 {found = 1} END {exit !found}' /proc/self/mounts; then
		die "mounts of an earlier cluster are still under $K8S_HOME: run make k8s-down first"
	fi
	trap 'log "up failed: make k8s-down stops what was started (logs: $logs)"' ERR
	rm -rf "$run"
	mkdir -p "$run"
	record_host_state
	make_bridge
	start_control_plane
	start_node
	kubectl get nodes -o wide
	log "up in $(elapsed) s; KUBECONFIG=$KUBECONFIG"
}

# remove_kube_chains: every iptables/ip6tables rule jumping to a KUBE-* chain,
# then the chains, in every table (kube-proxy --cleanup first does most).
remove_kube_chains() {
	local ipt t rule ch
	for ipt in iptables ip6tables; do
		command -v $ipt >/dev/null || continue
		for t in filter nat mangle raw; do
			{ $ipt -t $t -S 2>/dev/null || true; } | awk '$1 == "-A" && $2 !~ /^KUBE-/ && / -j KUBE-/' |
				while read -r -a rule; do $ipt -t $t -D "${rule[@]:1}" 2>/dev/null || true; done
			for ch in $($ipt -t $t -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^KUBE-/ {print $2}'); do
				$ipt -t $t -F "$ch" 2>/dev/null || true
			done
			for ch in $($ipt -t $t -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^KUBE-/ {print $2}'); do
				$ipt -t $t -X "$ch" 2>/dev/null || true
			done
		done
	done
}

# remove_new_nft_tables: the netfilter tables iptables(-nft) made for
# kubelet and kube-proxy (filter, nat, mangle of ip and ip6) stay behind,
# empty, after their chains are gone: delete each table that did not exist
# at up and holds no rule.
remove_new_nft_tables() {
	local family name
	command -v nft >/dev/null && [[ -f $run/nft-tables.before ]] || return 0
	nft list tables 2>/dev/null | while read -r _ family name; do
		grep -qx "table $family $name" "$run/nft-tables.before" && continue
		# A rule's line ends in "# handle N" and is no table or chain line
		# (read through a process substitution: grep -q stopping at the
		# first rule would end a pipeline's writers with SIGPIPE, and
		# pipefail would take the table for empty).
		if ! grep -qvE '^[[:space:]]*(table|chain) ' < <(nft -a list table "$family" "$name" | grep -E '# handle [0-9]+$'); then
			nft delete table "$family" "$name" || log "could not delete netfilter table $family $name"
		fi
	done
}

cmd_down() {
	[[ $(id -u) -eq 0 ]] || die "needs root"
	t0=$(date +%s)
	local i n c p
	# No controller recreates what is deleted next.
	stop kube-controller-manager
	stop kube-scheduler
	# Let kubelet stop the pods it runs.
	if alive kube-apiserver && alive kubelet && kubectl get --raw /readyz >/dev/null 2>&1; then
		kubectl delete pods --all -A --grace-period=5 --wait=false >/dev/null 2>&1 || true
		for ((i = 0; i < 60; i++)); do
			n=$(ctr --address "$SOCK" -n k8s.io tasks ls -q 2>/dev/null | wc -l)
			((n == 0)) && break
			sleep 0.5
		done
	fi
	stop coredns
	stop kube-proxy
	stop kubelet
	# Whatever kubelet left: kill the tasks and delete the containers.
	if alive containerd; then
		for c in $(ctr --address "$SOCK" -n k8s.io tasks ls -q 2>/dev/null); do
			ctr --address "$SOCK" -n k8s.io tasks kill -s SIGKILL "$c" >/dev/null 2>&1 || true
		done
		for c in $(ctr --address "$SOCK" -n k8s.io containers ls -q 2>/dev/null); do
			ctr --address "$SOCK" -n k8s.io tasks delete -f "$c" >/dev/null 2>&1 || true
			ctr --address "$SOCK" -n k8s.io containers delete "$c" >/dev/null 2>&1 || true
		done
	fi
	stop containerd
	for ((i = ${#CONTROL[@]} - 1; i >= 0; i--)); do stop "${CONTROL[i]}"; done
	# Shims of our containerd outlive it (reparented to pid 1): by pid, found
	# by our socket path in their command line.
	for p in $(pgrep -f "containerd-shim-runc-v2 .*-address $SOCK" || true); do
		kill -KILL "$p" 2>/dev/null && log "killed leftover shim $p"
	done
	# Mounts under our state (pod volumes, netns, rootfs), deepest first.
	awk -v r="$K8S_HOME/" 'index($2, r) == 1 {print $2}' /proc/self/mounts | sort -r |
		while read -r m; do umount "$m" 2>/dev/null || umount -l "$m" || log "could not unmount $m"; done
	if [[ -x $bin/kube-proxy ]] && command -v iptables >/dev/null; then
		"$bin/kube-proxy" --cleanup >"$logs/kube-proxy-cleanup.log" 2>&1 || true
	fi
	remove_kube_chains
	remove_new_nft_tables
	restore_sysctls
	if ip link show "$BRIDGE" >/dev/null 2>&1; then ip link del "$BRIDGE" || log "could not delete bridge $BRIDGE"; fi
	# Pod cgroups kubelet made (cgroupfs driver), leaves first; one that
	# still holds a process stays, and check_down reports it.
	for c in $(kubepods_cgroups); do
		grep -qxF "$c" "$run/cgroups.before" 2>/dev/null && continue
		find "$c" -depth -type d -exec rmdir {} + 2>/dev/null || true
	done
	if [[ -f $run/host-paths.created ]]; then
		while read -r p; do
			[[ -z $p ]] || rm -rf --one-file-system "$p" || log "could not remove $p"
		done <"$run/host-paths.created"
	fi
	log "down in $(elapsed) s"
	check_down
}

# check_down: prints what of the cluster is left on the host (nothing,
# after a clean down) and fails if anything is.
check_down() {
	local left=0 line p t procs mounts chains
	procs=$(pgrep -f "$K8S_HOME/" | xargs -r ps -o pid=,comm= -p | tr '\n' ' ' || true)
	[[ -z $procs ]] || { log "left: processes: $procs"; left=1; }
	if ip link show "$BRIDGE" >/dev/null 2>&1; then log "left: bridge $BRIDGE"; left=1; fi
	mounts=$(awk -v r="$K8S_HOME/" 'index($2, r) == 1 {print $2}' /proc/self/mounts)
	[[ -z $mounts ]] || { log "left: mounts: $mounts"; left=1; }
	if [[ -f $run/sysctl.before ]]; then
		while IFS= read -r line; do
			[[ $(sysctl -n "${line%%=*}" 2>/dev/null) == "${line#*=}" ]] ||
				{ log "left: sysctl ${line%%=*}=$(sysctl -n "${line%%=*}") (was ${line#*=})"; left=1; }
		done <"$run/sysctl.before"
	fi
	for t in iptables-save ip6tables-save; do
		command -v $t >/dev/null || continue
		chains=$($t 2>/dev/null | grep -c '^:KUBE-' || true)
		((chains == 0)) || { log "left: $chains KUBE- chains ($t)"; left=1; }
	done
	if command -v nft >/dev/null && [[ -f $run/nft-tables.before ]]; then
		while read -r line; do
			grep -qxF "$line" "$run/nft-tables.before" || { log "left: netfilter $line"; left=1; }
		done < <(nft list tables 2>/dev/null)
	fi
	if [[ -f $run/host-paths.created ]]; then
		while read -r p; do
			[[ -z $p || ! -e $p ]] || { log "left: $p"; left=1; }
		done <"$run/host-paths.created"
	fi
	if [[ -f $run/cgroups.before ]]; then
		while read -r p; do
			grep -qxF "$p" "$run/cgroups.before" ||
				{ log "left: cgroup $p ($(find "$p" -name cgroup.procs -exec cat {} + 2>/dev/null | wc -l) processes in it)"; left=1; }
		done < <(kubepods_cgroups)
	fi
	if ((left)); then
		log "the host still holds parts of the cluster (above)"
		return 1
	fi
	log "host clean: no process under $K8S_HOME, no bridge $BRIDGE, no mount, no KUBE- chain, no new netfilter table, no kubepods cgroup, sysctls and host paths as before up"
}

cmd_status() {
	local c p health
	for c in "${CONTROL[@]}" "${NODE_PROCS[@]}"; do
		p=$(pid_of "$c")
		if alive "$c"; then
			printf '%-24s running (pid %s)\n' "$c" "$p"
		else
			printf '%-24s stopped\n' "$c"
		fi
	done
	ip -br addr show "$BRIDGE" 2>/dev/null || echo "bridge $BRIDGE: absent"
	if ! kubectl get --raw /readyz >/dev/null 2>&1; then
		echo "API server: not reachable (KUBECONFIG=$KUBECONFIG)"
		return 0
	fi
	health=$(kubectl get --raw '/readyz' 2>&1)
	echo "API server $API_URL readyz: $health; server $(kubectl version -o json 2>/dev/null | sed -n 's/.*"gitVersion": "\(v1[^"]*\)".*/\1/p' | tail -1)"
	if curl -sf http://127.0.0.1:18181/ready >/dev/null 2>&1; then
		echo "cluster DNS: CoreDNS ready on $NODE_IP:53 (cluster.local)"
	else
		echo "cluster DNS: CoreDNS not ready"
	fi
	kubectl get nodes -o wide
	if alive containerd; then
		echo "images in the node's containerd (namespace k8s.io):"
		ctr --address "$SOCK" -n k8s.io images ls -q | grep -v '^sha256:' | sed 's/^/  /'
	fi
}

case ${1:-} in
up) cmd_up ;;
down) cmd_down ;;
status) cmd_status ;;
check-down) check_down ;;
images)
	mkdir -p "$logs"
	"$here/images.sh" build
	if alive containerd; then "$here/images.sh" import; fi
	;;
*)
	echo "usage: $0 up|down|status|images|check-down" >&2
	exit 2
	;;
esac
