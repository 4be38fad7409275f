#!/usr/bin/env bash
# images.sh: the local cluster's images, without a registry or a container
# builder. Called by k8s-local.sh.
#
#   images.sh build    service images + pause image + dependency images as
#                      docker-archive tars in $K8S_HOME/images
#   images.sh import   import those tars into the node's containerd
#                      (namespace k8s.io, where kubelet finds them)
#   images.sh keda DIR KEDA's operator and metrics server images
#                      (notiflow/keda:local, notiflow/keda-metrics-apiserver:local)
#                      from the static binaries keda and keda-adapter in DIR
#                      (keda.sh build), on the distroless-equivalent base
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
#
# The dependency images of the local overlay (deploy/k8s/components/deps)
# are made of this machine's own files, as `make deps` runs them:
#   notiflow/kafka:local    Kafka 4.1.1 from the Maven jars `make deps` uses
#                           (scripts/deps.sh kafka-libs) plus kafka-tools, on
#                           a Java runtime made by jlink from the machine's
#                           JDK; /opt/kafka/bin has kafka-topics.sh and
#                           kafka-consumer-groups.sh (the topic Job's script
#                           runs here; their heap is KAFKA_TOOLS_HEAP_OPTS,
#                           default -Xmx128m, never the broker's
#                           KAFKA_HEAP_OPTS, which a `kubectl exec` in the
#                           broker's pod inherits) and the entry point
#                           images/kafka-start.sh
#   notiflow/mariadb:local  Debian's mariadbd, with system tables made by
#                           mariadb-install-db at build time; entry point
#                           images/mariadb-start.sh
#   notiflow/redis:local    Debian's redis-server
# Each holds the binaries it runs with the shared libraries ldd lists for
# them, bash and the few tools the scripts call, and a user of its own (UID
# 1000 kafka, 999 mysql, 999 redis).
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
here=$root/scripts/k8s-local
K8S_HOME=${K8S_HOME:?}
out=$K8S_HOME/images
dockerfile=$root/Dockerfile
SOCK=$K8S_HOME/run/containerd/containerd.sock
TAG=dev
KAFKA_VERSION=4.1.1

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
	local service=$1 port=$2 w stage="" workdir=/ ins args src dst user="" expose="" entrypoint="" want have
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
			if [[ $args == golang:*" AS build" ]]; then
				# The build stage runs with this machine's Go: it must be
				# the release the Dockerfile names (golang:1.26 is any
				# go1.26.x).
				want=${args#golang:}
				want=go${want%% *}
				have=$(GOTOOLCHAIN=local go env GOVERSION)
				[[ $have == "$want" || $have == "$want".* ]] ||
					die "$dockerfile builds with golang:${want#go}, this machine's Go is $have"
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

# add_libs ROOTFS PATH...: the shared libraries that the ELF files at or
# under PATH (a path inside ROOTFS) load, the dynamic loader included, copied
# from the host to the same paths under ROOTFS (ldd).
add_libs() {
	local rootfs=$1 p lib
	shift
	for p in "$@"; do
		while read -r lib; do
			[[ -e $rootfs$lib ]] && continue
			mkdir -p "$rootfs$(dirname "$lib")"
			cp -L "$lib" "$rootfs$lib"
		done < <(find "$rootfs$p" -type f \( -perm -u+x -o -name '*.so*' \) -print0 | xargs -0 -r ldd 2>/dev/null |
			awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// && $2 ~ /^\(/ {print $1}' | sort -u)
	done
}

# host_files ROOTFS PATH...: host files and folders (symlinks followed)
# copied to the same paths under ROOTFS, with their shared libraries.
host_files() {
	local rootfs=$1 f
	shift
	for f in "$@"; do
		mkdir -p "$rootfs$(dirname "$f")"
		cp -RL "$f" "$rootfs$f"
		add_libs "$rootfs" "$f"
	done
}

# tools_base ROOTFS USER UID: bash (also as /bin/sh), the tools the entry
# scripts and the topic script call, /tmp and a passwd naming USER.
tools_base() {
	local d=$1 user=$2 uid=$3 t
	host_files "$d" /bin/bash
	for t in cat cp env grep head id ls mkdir rm sed seq sleep; do host_files "$d" "$(command -v $t)"; done
	ln -sf bash "$d/bin/sh"
	mkdir -p "$d/tmp" "$d/etc"
	chmod 1777 "$d/tmp"
	printf 'root:x:0:0:root:/root:/sbin/nologin\n%s:x:%s:%s:%s:/tmp:/sbin/nologin\n' "$user" "$uid" "$uid" "$user" >"$d/etc/passwd"
	printf 'root:x:0:\n%s:x:%s:\n' "$user" "$uid" >"$d/etc/group"
}

build_kafka() {
	local w lib tools java=$K8S_HOME/jre-kafka t
	lib=$("$root/scripts/deps.sh" kafka-libs)
	tools=$out/kafka-tools
	if [[ ! -f $tools/kafka-tools-$KAFKA_VERSION.jar ]]; then
		mvn -B -q dependency:copy -Dartifact="org.apache.kafka:kafka-tools:$KAFKA_VERSION" -DoutputDirectory="$tools" >"$out/kafka-tools.log" 2>&1 ||
			die "fetching org.apache.kafka:kafka-tools:$KAFKA_VERSION failed (see $out/kafka-tools.log)"
	fi
	# The Java modules the broker and the tools use, from the machine's JDK.
	if [[ ! -x $java/bin/java ]]; then
		rm -rf "$java"
		jlink --add-modules java.se,jdk.unsupported,jdk.management,jdk.crypto.ec,jdk.naming.dns,jdk.zipfs \
			--strip-debug --no-man-pages --no-header-files --compress=2 --output "$java" >/dev/null || die "jlink failed"
	fi
	w=$(mktemp -d "$out/build-kafka.XXXX")
	tools_base "$w" kafka 1000
	mkdir -p "$w/opt/kafka/libs" "$w/opt/kafka/bin" "$w/opt/kafka/config" "$w/var/lib/kafka"
	cp -R "$java" "$w/opt/java"
	add_libs "$w" /opt/java
	cp "$lib"/*.jar "$tools/kafka-tools-$KAFKA_VERSION.jar" "$w/opt/kafka/libs/"
	cp "$here/images/kafka-start.sh" "$w/opt/kafka/bin/kafka-start.sh"
	cp "$here/images/log4j2.properties" "$here/images/tools-log4j2.properties" "$w/opt/kafka/config/"
	for t in kafka-topics:org.apache.kafka.tools.TopicCommand \
		kafka-consumer-groups:org.apache.kafka.tools.consumer.group.ConsumerGroupCommand; do
		printf '#!/bin/bash\nexec /opt/java/bin/java ${KAFKA_TOOLS_HEAP_OPTS:--Xmx128m} -Dlog4j2.configurationFile=/opt/kafka/config/tools-log4j2.properties -cp "/opt/kafka/libs/*" %s "$@"\n' \
			"${t#*:}" >"$w/opt/kafka/bin/${t%%:*}.sh"
	done
	chmod 755 "$w"/opt/kafka/bin/*.sh
	chown 1000:1000 "$w/var/lib/kafka"
	docker_archive "$w" notiflow/kafka:local \
		'"User":"1000","ExposedPorts":{"9092/tcp":{}},"Env":["PATH=/opt/kafka/bin:/opt/java/bin:/usr/bin:/bin"],"Entrypoint":["/opt/kafka/bin/kafka-start.sh"],"WorkingDir":"/tmp"' \
		"$out/kafka.tar"
	rm -rf "$w"
	echo "built notiflow/kafka:local ($out/kafka.tar)"
}

build_mariadb() {
	local w
	w=$(mktemp -d "$out/build-mariadb.XXXX")
	tools_base "$w" mysql 999
	host_files "$w" /usr/sbin/mariadbd /usr/share/mysql
	# The system tables, made once here so the image needs no install script.
	mariadb-install-db --no-defaults --datadir="$w/usr/share/notiflow/mariadb-initdb" --user=root \
		--auth-root-authentication-method=socket --skip-test-db --innodb-log-file-size=16M >"$out/mariadb-install-db.log" 2>&1 ||
		die "mariadb-install-db failed (see $out/mariadb-install-db.log)"
	chown -R 999:999 "$w/usr/share/notiflow/mariadb-initdb"
	mkdir -p "$w/var/lib/mysql" "$w/usr/local/bin"
	chown 999:999 "$w/var/lib/mysql"
	install -m 755 "$here/images/mariadb-start.sh" "$w/usr/local/bin/mariadb-start.sh"
	docker_archive "$w" notiflow/mariadb:local \
		'"User":"999","ExposedPorts":{"3306/tcp":{}},"Env":["PATH=/usr/local/bin:/usr/sbin:/usr/bin:/bin"],"Entrypoint":["/usr/local/bin/mariadb-start.sh"],"WorkingDir":"/tmp"' \
		"$out/mariadb.tar"
	rm -rf "$w"
	echo "built notiflow/mariadb:local ($out/mariadb.tar)"
}

build_redis() {
	local w
	w=$(mktemp -d "$out/build-redis.XXXX")
	tools_base "$w" redis 999
	host_files "$w" /usr/bin/redis-server
	mkdir -p "$w/data"
	chown 999:999 "$w/data"
	docker_archive "$w" notiflow/redis:local \
		'"User":"999","ExposedPorts":{"6379/tcp":{}},"Env":["PATH=/usr/bin:/bin"],"Entrypoint":["/usr/bin/redis-server"],"WorkingDir":"/data"' \
		"$out/redis.tar"
	rm -rf "$w"
	echo "built notiflow/redis:local ($out/redis.tar)"
}

# build_keda DIR: KEDA's images from its static binaries (keda.sh build).
build_keda() {
	local dir=$1 b w
	for b in keda:keda keda-adapter:keda-metrics-apiserver; do
		w=$(mktemp -d "$out/build-${b%%:*}.XXXX")
		distroless_base "$w"
		cp "$dir/${b%%:*}" "$w/${b%%:*}"
		docker_archive "$w" "notiflow/${b#*:}:local" \
			"\"User\":\"65532\",\"Env\":[\"PATH=/usr/local/bin:/usr/bin:/bin\"],\"Entrypoint\":[\"/${b%%:*}\"],\"WorkingDir\":\"/\"" \
			"$out/${b#*:}.tar"
		rm -rf "$w"
		echo "built notiflow/${b#*:}:local ($out/${b#*:}.tar)"
	done
}

cmd_build() {
	local s
	mkdir -p "$out"
	rm -rf "$out"/build-* "$out"/archive.*
	build_pause
	build_kafka
	build_mariadb
	build_redis
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
keda)
	mkdir -p "$out"
	build_keda "${2:?usage: $0 keda DIR}"
	;;
*) die "usage: $0 build|import" ;;
esac
