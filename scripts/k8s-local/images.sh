#!/usr/bin/env bash
# images.sh: the local cluster's images, without a registry or a container
# builder. Called by k8s-local.sh.
#
#   images.sh build    service images + pause image as docker-archive tars
#                      in $K8S_HOME/images
#   images.sh import   import those tars into the node's containerd
#                      (namespace k8s.io, where kubelet finds them)
#
# The repository's Dockerfile stays the recipe: this script reads it and
# carries out the instructions it uses. The build stage's WORKDIR, ENV, COPY
# and RUN run on this machine with the local Go (the stage's absolute paths
# mapped into a scratch folder, --mount options dropped, so the Go caches are
# the machine's). The final stage's COPY --from=build, USER, EXPOSE and
# ENTRYPOINT make a one-layer image on a base equivalent to
# gcr.io/distroless/static-debian12:nonroot (passwd/group with nonroot
# 65532, CA certificates, /tmp). Any other instruction or base image stops
# the build, so the Dockerfile cannot grow a step this script would skip.
# The services and their ports are the `docker build` lines of the
# Dockerfile's header; images are tagged notiflow/<service>:dev (the dev
# overlay's tag). The pause image is localhost/notiflow/pause:local, from
# pause.c.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
here=$root/scripts/k8s-local
K8S_HOME=${K8S_HOME:?}
out=$K8S_HOME/images
dockerfile=$root/Dockerfile
SOCK=$K8S_HOME/run/containerd/containerd.sock
TAG=dev

die() {
	echo "images.sh: $*" >&2
	exit 1
}

# instructions: the Dockerfile's instructions, one a line (continuations
# joined, comments and the parser directive dropped).
instructions() {
	sed -e '/^[[:space:]]*#/d' "$dockerfile" | awk '
		/\\[[:space:]]*$/ { sub(/\\[[:space:]]*$/, ""); line = line $0 " "; next }
		{ line = line $0; if (line ~ /[^[:space:]]/) print line; line = "" }'
}

# docker_archive ROOTFS REF CONFIG-JSON-FIELDS OUT: a one-layer image in
# docker-archive format (the layout `docker save` writes).
docker_archive() {
	local rootfs=$1 ref=$2 fields=$3 tarfile=$4 w diff cfg
	w=$(mktemp -d "$out/archive.XXXX")
	tar --numeric-owner --sort=name --mtime=@0 -C "$rootfs" -cf "$w/layer.tar" .
	diff=$(sha256sum "$w/layer.tar" | cut -d' ' -f1)
	printf '{"architecture":"amd64","os":"linux","config":{%s},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]},"history":[{"created_by":"scripts/k8s-local/images.sh"}]}' \
		"$fields" "$diff" >"$w/config.json"
	cfg=$(sha256sum "$w/config.json" | cut -d' ' -f1)
	mv "$w/config.json" "$w/$cfg.json"
	printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["layer.tar"]}]' "$cfg" "$ref" >"$w/manifest.json"
	tar -C "$w" -cf "$tarfile.tmp" manifest.json "$cfg.json" layer.tar
	mv "$tarfile.tmp" "$tarfile"
	rm -rf "$w"
}

# distroless_base DIR: the files of distroless static:nonroot the services use.
distroless_base() {
	local d=$1
	mkdir -p "$d/etc/ssl/certs" "$d/tmp" "$d/home/nonroot"
	chmod 1777 "$d/tmp"
	chown 65532:65532 "$d/home/nonroot"
	printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$d/etc/passwd"
	printf 'root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n' >"$d/etc/group"
	cp /etc/ssl/certs/ca-certificates.crt "$d/etc/ssl/certs/ca-certificates.crt"
}

# build_service SERVICE PORT: carry out the Dockerfile for one service.
build_service() {
	local service=$1 port=$2 w stage="" workdir=/ ins args src dst user="" expose="" entrypoint=""
	local -a env=("SERVICE=$service" "PORT=$port" GOTOOLCHAIN=local)
	w=$(mktemp -d "$out/build-$service.XXXX")
	mkdir -p "$w/fs" "$w/image"
	# path P: where the build stage's absolute path P lives here.
	path() { if [[ $1 == /* ]]; then echo "$w/fs$1"; else echo "$w/fs$workdir/$1"; fi; }
	while read -r ins args; do
		args=${args//\$\{SERVICE\}/$service}
		args=${args//\$\{PORT\}/$port}
		case $ins in
		FROM)
			if [[ $args == *" AS build" ]]; then
				stage=build
			elif [[ $args == "gcr.io/distroless/static-debian12:nonroot" ]]; then
				stage=final
				distroless_base "$w/image"
			else
				die "unsupported base image in $dockerfile: $args"
			fi
			;;
		ARG) ;;
		WORKDIR)
			[[ $stage == build ]] || die "WORKDIR outside the build stage"
			workdir=$args
			mkdir -p "$(path "$workdir")"
			;;
		ENV)
			[[ $stage == build ]] || die "ENV outside the build stage: $args"
			read -r -a more <<<"$args"
			env+=("${more[@]}")
			;;
		COPY)
			read -r -a words <<<"$args"
			if [[ ${words[0]} == --from=build ]]; then
				[[ $stage == final ]] || die "COPY --from outside the final stage"
				src=${words[1]} dst=${words[2]}
				mkdir -p "$(dirname "$w/image$dst")"
				cp "$w/fs$src" "$w/image$dst"
			else
				[[ $stage == build ]] || die "COPY from the context outside the build stage: $args"
				dst=$(path "${words[-1]}")
				# Docker's semantics: a folder's contents go into the
				# destination; a file goes into a destination ending in "/".
				for src in "${words[@]:0:${#words[@]}-1}"; do
					if [[ -d $root/$src ]]; then
						mkdir -p "$dst" && cp -rT "$root/$src" "$dst"
					elif [[ $dst == */ ]]; then
						mkdir -p "$dst" && cp "$root/$src" "$dst"
					else
						mkdir -p "$(dirname "$dst")" && cp "$root/$src" "$dst"
					fi
				done
			fi
			;;
		RUN)
			[[ $stage == build ]] || die "RUN outside the build stage: $args"
			while [[ $args == --mount=* ]]; do args=${args#* }; done
			# Absolute paths of the build stage (/src, /out) map into $w/fs.
			args=$(sed -E "s#(^|[[:space:]=])/(src|out)(/|[[:space:]]|\$)#\1$w/fs/\2\3#g" <<<"$args")
			mkdir -p "$w/fs/out"
			(cd "$(path "$workdir")" && env "${env[@]}" sh -ec "$args") || die "RUN failed for $service: $args"
			;;
		USER) user=$args ;;
		EXPOSE) expose=$args ;;
		ENTRYPOINT) entrypoint=$args ;;
		*) die "instruction $ins is not supported by $0 (add it here)" ;;
		esac
	done < <(instructions)
	[[ -n $entrypoint && -n $user ]] || die "no ENTRYPOINT or USER in $dockerfile"
	docker_archive "$w/image" "notiflow/$service:$TAG" \
		"\"User\":\"$user\",\"ExposedPorts\":{\"$expose/tcp\":{}},\"Env\":[\"PATH=/usr/local/bin:/usr/bin:/bin\",\"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt\"],\"Entrypoint\":$entrypoint,\"WorkingDir\":\"/\"" \
		"$out/$service.tar"
	rm -rf "$w"
	echo "built notiflow/$service:$TAG ($out/$service.tar)"
}

build_pause() {
	local w
	w=$(mktemp -d "$out/build-pause.XXXX")
	gcc -Os -static -o "$w/pause" "$here/pause.c"
	strip "$w/pause"
	docker_archive "$w" localhost/notiflow/pause:local '"Entrypoint":["/pause"],"WorkingDir":"/"' "$out/pause.tar"
	rm -f "$w/pause"
	rmdir "$w"
	echo "built localhost/notiflow/pause:local ($out/pause.tar)"
}

cmd_build() {
	local s
	mkdir -p "$out"
	rm -rf "$out"/build-* "$out"/archive.*
	build_pause
	# The Dockerfile's header names each service with its port.
	while read -r s; do
		build_service "${s%:*}" "${s#*:}"
	done < <(sed -nE 's/^#[[:space:]]+docker build --build-arg SERVICE=([a-z]+)[[:space:]]+--build-arg PORT=([0-9]+).*/\1:\2/p' "$dockerfile")
}

cmd_import() {
	local t
	for t in "$out"/*.tar; do
		ctr --address "$SOCK" -n k8s.io images import "$t" >/dev/null || die "import of $t failed"
	done
	echo "imported $(ls "$out"/*.tar | wc -l) images into the node's containerd"
}

case ${1:-} in
build) cmd_build ;;
import) cmd_import ;;
*) die "usage: $0 build|import" ;;
esac
