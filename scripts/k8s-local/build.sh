#!/usr/bin/env bash
# build.sh: builds the local cluster's Kubernetes binaries once and caches
# them under $K8S_HOME/bin (default .deps/k8s/bin). Called by k8s-local.sh.
#
# `go install k8s.io/kubernetes/cmd/...` is refused by the Go command because
# k8s.io/kubernetes's go.mod replaces its staging modules with local paths.
# So this writes a wrapper module that requires k8s.io/kubernetes and replaces
# each staging module (read from that version's go.mod) with its published
# v0.x.y version, then builds kube-apiserver, kube-controller-manager,
# kube-scheduler, kubelet and kube-proxy in one `go build`, with the version
# stamped through -ldflags (else the binaries report v0.0.0).
#
# A binary set is reused when $K8S_HOME/bin/VERSION names the wanted version;
# delete that file to force a rebuild. Cold: ~7 min of two cores, ~2 GB RSS.
#
# Cluster DNS is CoreDNS, installed from its Go module (no replaces) into
# the same folder; reused while $K8S_HOME/bin/COREDNS_VERSION names the
# wanted version (~3 min cold).
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.35.4}
COREDNS_VERSION=${COREDNS_VERSION:-v1.15.0}
K8S_HOME=${K8S_HOME:?K8S_HOME must name the cache directory}
bin=$K8S_HOME/bin
components=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy)
export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false GOWORK=off
mkdir -p "$bin"

if [[ ! -x $bin/coredns || $(cat "$bin/COREDNS_VERSION" 2>/dev/null) != "$COREDNS_VERSION" ]]; then
	start=$(date +%s)
	GOBIN=$bin CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" "github.com/coredns/coredns@$COREDNS_VERSION"
	echo "$COREDNS_VERSION" >"$bin/COREDNS_VERSION"
	echo "built CoreDNS $COREDNS_VERSION in $(($(date +%s) - start)) s into $bin"
fi

if [[ -f $bin/VERSION && $(cat "$bin/VERSION") == "$K8S_VERSION" ]]; then
	exit 0
fi

src=$K8S_HOME/build
mkdir -p "$src"
cd "$src"

# The staging modules are the k8s.io/kubernetes go.mod's "=> ./staging/..." replaces.
kmod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')
[[ -f $kmod ]] || { echo "build.sh: no go.mod for k8s.io/kubernetes@$K8S_VERSION" >&2; exit 1; }
staging_version=v0.${K8S_VERSION#v1.}
{
	echo "module notiflow.local/k8sbuild"
	echo
	echo "go $(go env GOVERSION | sed 's/^go//')"
	echo
	echo "require k8s.io/kubernetes $K8S_VERSION"
	echo
	echo "replace ("
	awk '$2 == "=>" && $3 ~ /^\.\/staging\// { print "\t" $1 " => " $1 " '"$staging_version"'" }' "$kmod"
	echo ")"
} >go.mod
pkgs=()
for c in "${components[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
go get "${pkgs[@]/%/@$K8S_VERSION}" >/dev/null

minor=${K8S_VERSION#v1.}
minor=${minor%%.*}
ldflags="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
done
start=$(date +%s)
go build -trimpath -ldflags "$ldflags" -o "$bin/" "${pkgs[@]}"
echo "$K8S_VERSION" >"$bin/VERSION"
echo "built Kubernetes $K8S_VERSION (${components[*]}) in $(($(date +%s) - start)) s into $bin"
