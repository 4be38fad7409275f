#!/usr/bin/env bash
# keda.sh: KEDA's operator and metrics server on the local cluster, built
# from KEDA's Go module (no image registry). Called by test.sh.
#
#   keda.sh build      the operator (keda) and the metrics server
#                      (keda-adapter) from github.com/kedacore/keda/v2 at
#                      $KEDA_VERSION, cached in $K8S_HOME/keda/<version>/bin;
#                      then their images notiflow/keda:local and
#                      notiflow/keda-metrics-apiserver:local (images.sh keda),
#                      imported into the running node
#   keda.sh install    KEDA's own manifests (config/minimal of the module:
#                      CRDs, namespace keda, RBAC, operator, metrics server
#                      and its APIService) with those images, applied
#                      server-side; waits until the operator runs and the
#                      external metrics API is available
#   keda.sh uninstall  deletes what install applied
#
# KEDA's go.mod asks for a newer Go than the machine's: GOTOOLCHAIN
# ($KEDA_GOTOOLCHAIN, default go1.27.4) fetches that toolchain through the
# module proxy. The first build takes minutes (KEDA links every scaler's
# SDK); later ones reuse the binaries.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
here=$root/scripts/k8s-local
K8S_HOME=${K8S_HOME:-$root/.deps/k8s}
K8S_HOME=$(realpath "$K8S_HOME")
export K8S_HOME KUBECONFIG=$K8S_HOME/kubeconfig
KEDA_VERSION=${KEDA_VERSION:-v2.21.1}
KEDA_GOTOOLCHAIN=${KEDA_GOTOOLCHAIN:-go1.27.4}
dir=$K8S_HOME/keda/$KEDA_VERSION
src=$dir/src
bin=$dir/bin

say() { printf '[keda %s] %s\n' "$(date +%T)" "$*"; }
die() {
	say "error: $*" >&2
	exit 1
}

# source_tree: KEDA's module, unpacked once from the module cache's zip.
source_tree() {
	local zip
	[[ -f $src/go.mod ]] && return 0
	# go mod download reports the go.mod's newer Go as an error after
	# fetching the zip; the zip is what is used.
	zip=$(GOWORK=off GOTOOLCHAIN=local go mod download -json "github.com/kedacore/keda/v2@$KEDA_VERSION" 2>/dev/null |
		sed -n 's/^\t"Zip": "\(.*\)",$/\1/p') || true
	[[ -f $zip ]] || die "github.com/kedacore/keda/v2@$KEDA_VERSION: no module zip from the module proxy"
	rm -rf "$dir/unpack" "$src"
	mkdir -p "$dir/unpack"
	unzip -q "$zip" -d "$dir/unpack"
	mv "$dir/unpack/github.com/kedacore/keda/v2@$KEDA_VERSION" "$src"
	rm -rf "$dir/unpack"
	chmod -R u+w "$src"
}

cmd_build() {
	source_tree
	if [[ ! -x $bin/keda || ! -x $bin/keda-adapter ]]; then
		say "building KEDA $KEDA_VERSION operator and metrics server with $KEDA_GOTOOLCHAIN (log: $dir/build.log)"
		mkdir -p "$bin"
		(cd "$src" && GOWORK=off GOTOOLCHAIN=$KEDA_GOTOOLCHAIN GOFLAGS=-mod=mod CGO_ENABLED=0 \
			go build -trimpath -ldflags "-s -w -X github.com/kedacore/keda/v2/version.Version=$KEDA_VERSION" \
			-o "$bin/" ./cmd/operator ./cmd/adapter) >"$dir/build.log" 2>&1 ||
			{ tail -20 "$dir/build.log" >&2; die "go build of KEDA failed"; }
		mv "$bin/operator" "$bin/keda"
		mv "$bin/adapter" "$bin/keda-adapter"
	fi
	"$here/images.sh" keda "$bin"
	if [[ -S $K8S_HOME/run/containerd/containerd.sock ]]; then "$here/images.sh" import; fi
}

# manifests: config/minimal of KEDA's module with the local images.
manifests() {
	kubectl kustomize "$src/config/minimal" |
		sed -e 's#image: ghcr.io/kedacore/keda:.*#image: notiflow/keda:local#' \
			-e 's#image: ghcr.io/kedacore/keda-metrics-apiserver:.*#image: notiflow/keda-metrics-apiserver:local#' \
			-e 's#imagePullPolicy: Always#imagePullPolicy: Never#'
}

cmd_install() {
	source_tree
	manifests | kubectl apply --server-side --force-conflicts -f - >/dev/null
	kubectl -n keda rollout status deployment/keda-operator --timeout=180s >/dev/null ||
		die "keda-operator not rolled out: $(kubectl -n keda logs deployment/keda-operator 2>&1 | tail -5)"
	kubectl -n keda rollout status deployment/keda-metrics-apiserver --timeout=180s >/dev/null ||
		die "keda-metrics-apiserver not rolled out: $(kubectl -n keda logs deployment/keda-metrics-apiserver 2>&1 | tail -5)"
	kubectl wait --for=condition=Available apiservice/v1beta1.external.metrics.k8s.io --timeout=180s >/dev/null ||
		die "APIService v1beta1.external.metrics.k8s.io not Available: $(kubectl get apiservice v1beta1.external.metrics.k8s.io -o jsonpath='{.status.conditions}')"
	say "KEDA $KEDA_VERSION running: operator and metrics server Ready, external metrics API available"
}

cmd_uninstall() {
	source_tree
	manifests | kubectl delete --ignore-not-found --wait=false -f - >/dev/null
}

case ${1:-} in
build) cmd_build ;;
install) cmd_install ;;
uninstall) cmd_uninstall ;;
*)
	echo "usage: $0 build|install|uninstall" >&2
	exit 2
	;;
esac
