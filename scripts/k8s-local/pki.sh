#!/usr/bin/env bash
# pki.sh: the local cluster's certificates and kubeconfigs, made once with
# openssl under $K8S_HOME/pki (kept across up/down; delete the folder to
# make new ones). Called by k8s-local.sh.
#
# A CA; the API server's serving certificate (127.0.0.1, the node address,
# the first service address, the kubernetes.default names); client
# certificates for the admin (system:masters), the controller-manager, the
# scheduler, kube-proxy, CoreDNS, the kubelet (system:node:$NODE) and the API
# server's kubelet client; the service-account key pair; a second CA for
# the aggregation layer (front-proxy-ca) and the API server's client
# certificate under it, with which it proxies to extension API servers such
# as KEDA's metrics server. The admin kubeconfig is $K8S_HOME/kubeconfig, the
# others $K8S_HOME/pki/*.kubeconfig; each names the API server at the node
# address (API_URL).
set -euo pipefail

K8S_HOME=${K8S_HOME:?}
NODE=${NODE:?}
NODE_IP=${NODE_IP:?}
API=${API_URL:?}
pki=$K8S_HOME/pki
mkdir -p "$pki"
cd "$pki"
umask 077

if [[ ! -f ca.crt ]]; then
	openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 \
		-subj "/CN=notiflow-k8s-local-ca" 2>/dev/null
fi
# The aggregation layer's own CA: a certificate it signs lets its holder
# name any user to an extension API server, so it signs nothing else.
if [[ ! -f front-proxy-ca.crt ]]; then
	openssl req -x509 -newkey rsa:2048 -nodes -keyout front-proxy-ca.key -out front-proxy-ca.crt -days 3650 \
		-subj "/CN=notiflow-k8s-local-front-proxy-ca" 2>/dev/null
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

# kubeconfig NAME FILE: a kubeconfig using NAME's client certificate (the
# server address is set again each time).
kubeconfig() {
	local name=$1 file=$2
	if [[ -f $file ]]; then
		kubectl config --kubeconfig="$file" set-cluster local --server="$API" >/dev/null
		return 0
	fi
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
# The API server's client certificate for the aggregation layer.
if [[ ! -f front-proxy-client.crt ]]; then
	openssl req -newkey rsa:2048 -nodes -keyout front-proxy-client.key -out front-proxy-client.csr \
		-subj "/CN=front-proxy-client" 2>/dev/null
	printf 'extendedKeyUsage=clientAuth\n' >front-proxy-client.ext
	openssl x509 -req -in front-proxy-client.csr -CA front-proxy-ca.crt -CAkey front-proxy-ca.key -CAcreateserial \
		-days 3650 -extfile front-proxy-client.ext -out front-proxy-client.crt 2>/dev/null
	rm -f front-proxy-client.csr front-proxy-client.ext
fi

kubeconfig admin "$K8S_HOME/kubeconfig"
for n in controller-manager scheduler kube-proxy kubelet coredns; do
	kubeconfig "$n" "$n.kubeconfig"
done
rm -f done
