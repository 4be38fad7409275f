#!/usr/bin/env bash
# pki.sh: the local cluster's certificates and kubeconfigs, made once with
# openssl under $K8S_HOME/pki (kept across up/down; delete the folder to
# make new ones). Called by k8s-local.sh.
#
# A CA; the API server's serving certificate (127.0.0.1, the node address,
# the first service address, the kubernetes.default names); client
# certificates for the admin (system:masters), the controller-manager, the
# scheduler, kube-proxy, CoreDNS, the kubelet (system:node:$NODE) and the API
# server's kubelet client; the service-account key pair. The admin
# kubeconfig is $K8S_HOME/kubeconfig, the others $K8S_HOME/pki/*.kubeconfig.
set -euo pipefail

K8S_HOME=${K8S_HOME:?}
NODE=${NODE:?}
NODE_IP=${NODE_IP:?}
API=https://127.0.0.1:${API_PORT:-16443}
pki=$K8S_HOME/pki
mkdir -p "$pki"
cd "$pki"
umask 077

if [[ ! -f ca.crt ]]; then
	openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 \
		-subj "/CN=notiflow-k8s-local-ca" 2>/dev/null
fi
if [[ ! -f sa.pub ]]; then
	openssl genrsa -out sa.key 2048 2>/dev/null
	openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
fi

# cert NAME SUBJECT [SUBJECT-ALT-NAMES]: a key and a certificate signed by
# the CA; with alt names it serves TLS, without it is a client certificate.
cert() {
	local name=$1 subject=$2 san=${3:-}
	[[ -f $name.crt ]] && return 0
	openssl req -newkey rsa:2048 -nodes -keyout "$name.key" -out "$name.csr" -subj "$subject" 2>/dev/null
	if [[ -n $san ]]; then
		printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$san" >"$name.ext"
	else
		printf 'extendedKeyUsage=clientAuth\n' >"$name.ext"
	fi
	openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
		-extfile "$name.ext" -out "$name.crt" 2>/dev/null
	rm -f "$name.csr" "$name.ext"
}

# kubeconfig NAME FILE: a kubeconfig using NAME's client certificate.
kubeconfig() {
	local name=$1 file=$2
	[[ -f $file ]] && return 0
	kubectl config --kubeconfig="$file" set-cluster local --server="$API" \
		--certificate-authority="$pki/ca.crt" --embed-certs=true >/dev/null
	kubectl config --kubeconfig="$file" set-credentials "$name" --client-certificate="$pki/$name.crt" \
		--client-key="$pki/$name.key" --embed-certs=true >/dev/null
	kubectl config --kubeconfig="$file" set-context local --cluster=local --user="$name" >/dev/null
	kubectl config --kubeconfig="$file" use-context local >/dev/null
}

cert apiserver "/CN=kube-apiserver" \
	"DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:127.0.0.1,IP:10.96.0.1,IP:$NODE_IP"
cert kubelet-serving "/CN=$NODE" "DNS:$NODE,IP:$NODE_IP,IP:127.0.0.1"
cert admin "/O=system:masters/CN=k8s-local-admin"
cert controller-manager "/CN=system:kube-controller-manager"
cert scheduler "/CN=system:kube-scheduler"
cert kube-proxy "/CN=system:kube-proxy"
cert coredns "/CN=k8s-local:coredns"
cert kubelet "/O=system:nodes/CN=system:node:$NODE"
cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"

kubeconfig admin "$K8S_HOME/kubeconfig"
for n in controller-manager scheduler kube-proxy kubelet coredns; do
	kubeconfig "$n" "$n.kubeconfig"
done
rm -f done
