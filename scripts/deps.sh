#!/usr/bin/env bash
# Real local dependencies for notiflow tests: Apache Kafka (single-node KRaft,
# assembled from Maven Central), MariaDB and Redis (Debian packages), all run
# as plain background processes (no Docker, no systemd) with their state under
# <repo>/.deps/.
#
#   scripts/deps.sh up                 start whatever is not already answering
#   scripts/deps.sh down               stop what this script started
#   scripts/deps.sh status             state of each service (exit 1 if any is down)
#   scripts/deps.sh env                export lines for the tests: eval "$(scripts/deps.sh env)"
#   scripts/deps.sh stop  kafka|mariadb|redis   graceful stop of one service we started
#   scripts/deps.sh start kafka|mariadb|redis   start it again on its existing data
#   scripts/deps.sh kafka-libs         fetch the Kafka jars (if missing) and print their folder
#
# Ports can be overridden (defaults in brackets): NOTIFLOW_DEPS_KAFKA_PORT [9092],
# NOTIFLOW_DEPS_KAFKA_CONTROLLER_PORT [9093], NOTIFLOW_DEPS_MYSQL_PORT [3306],
# NOTIFLOW_DEPS_REDIS_PORT [6379]. MariaDB's InnoDB buffer pool and redo log
# size: NOTIFLOW_DEPS_MYSQL_BUFFER_POOL [2G], NOTIFLOW_DEPS_MYSQL_REDO_LOG [1G]
# (the server defaults, 128M and 96M, make a million-notification run cost
# about twice as much per notification as a 100,000 one: see bench/README.md).
# Keep the ports stable for one .deps/ directory:
# the Kafka controller endpoint is recorded in its storage when it is formatted.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$SCRIPT_DIR/.." && pwd)
DEPS="$ROOT/.deps"

KAFKA_VERSION=4.1.1
KAFKA_PORT=${NOTIFLOW_DEPS_KAFKA_PORT:-9092}
KAFKA_CONTROLLER_PORT=${NOTIFLOW_DEPS_KAFKA_CONTROLLER_PORT:-9093}
MYSQL_PORT=${NOTIFLOW_DEPS_MYSQL_PORT:-3306}
MYSQL_BUFFER_POOL=${NOTIFLOW_DEPS_MYSQL_BUFFER_POOL:-2G}
MYSQL_REDO_LOG=${NOTIFLOW_DEPS_MYSQL_REDO_LOG:-1G}
REDIS_PORT=${NOTIFLOW_DEPS_REDIS_PORT:-6379}
HOST=127.0.0.1

MYSQL_USER=notiflow
MYSQL_PASSWORD=notiflow
MYSQL_DB=notiflow

KAFKA_DIR="$DEPS/kafka"
KAFKA_LIB="$KAFKA_DIR/lib"
KAFKA_DATA="$KAFKA_DIR/data"
KAFKA_LOGS="$KAFKA_DIR/logs"
KAFKA_PID="$KAFKA_DIR/kafka.pid"
KAFKA_PROPS="$KAFKA_DIR/server.properties"
KAFKA_START_TIMEOUT=90

MYSQL_DIR="$DEPS/mariadb"
MYSQL_DATA="$MYSQL_DIR/data"
MYSQL_SOCK="$MYSQL_DIR/mysqld.sock"
MYSQL_PID="$MYSQL_DIR/mariadbd.pid"
MYSQL_LOG="$MYSQL_DIR/mariadbd.log"
MYSQL_START_TIMEOUT=60

REDIS_DIR="$DEPS/redis"
REDIS_PID="$REDIS_DIR/redis.pid"
REDIS_LOG="$REDIS_DIR/redis.log"
REDIS_CONF="$REDIS_DIR/redis.conf"

STOP_TIMEOUT=60

log() { printf '%s\n' "$*"; }
warn() { printf 'deps.sh: %s\n' "$*" >&2; }
die() { printf 'deps.sh: error: %s\n' "$*" >&2; exit 1; }

# Print the last lines of a log file to stderr, framed.
show_tail() {
	local file=$1 n=${2:-40}
	if [[ -s $file ]]; then
		printf -- '----- last %s lines of %s -----\n' "$n" "$file" >&2
		tail -n "$n" "$file" >&2
		printf -- '-----\n' >&2
	fi
}

port_open() { timeout 1 bash -c "exec 3<>/dev/tcp/$HOST/$1" 2>/dev/null; }

# pid_alive PIDFILE PATTERN: the pid in PIDFILE is running and its command line
# contains PATTERN (guards against a stale pid file whose pid was reused).
pid_alive() {
	local pidfile=$1 pattern=$2 pid
	[[ -s $pidfile ]] || return 1
	pid=$(<"$pidfile")
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	[[ -r /proc/$pid/cmdline ]] || return 1
	tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$pattern"
}

# stop_pid NAME PIDFILE PATTERN [SIGNAL]: graceful stop, wait, then SIGKILL.
stop_pid() {
	local name=$1 pidfile=$2 pattern=$3 sig=${4:-TERM} pid i
	if ! pid_alive "$pidfile" "$pattern"; then
		rm -f "$pidfile"
		return 0
	fi
	pid=$(<"$pidfile")
	kill "-$sig" "$pid" 2>/dev/null || true
	for ((i = 0; i < STOP_TIMEOUT * 10; i++)); do
		[[ -d /proc/$pid ]] || break
		sleep 0.1
	done
	if [[ -d /proc/$pid ]]; then
		warn "$name (pid $pid) did not exit within ${STOP_TIMEOUT}s; killing it"
		kill -KILL "$pid" 2>/dev/null || true
		while [[ -d /proc/$pid ]]; do sleep 0.1; done
	fi
	rm -f "$pidfile"
	log "$name stopped (pid $pid)"
}

# Install Debian packages quietly, waiting for a dpkg lock held by another
# apt run instead of failing. Services are not auto-started by the package
# scripts (they would take our ports), unless a policy-rc.d already exists.
apt_install() {
	local logf="$DEPS/apt.log" policy=/usr/sbin/policy-rc.d made_policy=0 rc=0
	[[ $(id -u) -eq 0 ]] || die "need root to apt-get install $*"
	log "installing $* (log: $logf)"
	if [[ ! -e $policy ]]; then
		printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && made_policy=1
	fi
	export DEBIAN_FRONTEND=noninteractive
	local apt=(apt-get -o DPkg::Lock::Timeout=900 -y -q)
	if ! "${apt[@]}" install --no-install-recommends "$@" >>"$logf" 2>&1; then
		"${apt[@]}" update >>"$logf" 2>&1 && "${apt[@]}" install --no-install-recommends "$@" >>"$logf" 2>&1 || rc=$?
	fi
	((made_policy)) && rm -f "$policy"
	if ((rc != 0)); then
		show_tail "$logf"
		die "apt-get install $* failed"
	fi
}

need_cmd() { # need_cmd PACKAGE CMD...: install PACKAGE unless one of CMD exists
	local pkg=$1 c
	shift
	for c in "$@"; do command -v "$c" >/dev/null 2>&1 && return 0; done
	apt_install "$pkg"
}

first_cmd() { # first available of the given command names
	local c
	for c in "$@"; do
		if command -v "$c" >/dev/null 2>&1; then
			printf '%s' "$c"
			return 0
		fi
	done
	return 1
}

# ---------------------------------------------------------------- Kafka

kafka_ours() { pid_alive "$KAFKA_PID" "kafka.Kafka"; }
kafka_ready() { port_open "$KAFKA_PORT"; }

kafka_libs() {
	local pom="$SCRIPT_DIR/kafka/pom.xml" marker="$KAFKA_LIB/.complete" want
	want="$KAFKA_VERSION $(sha256sum "$pom" | cut -d' ' -f1)"
	if [[ -f $marker && $(<"$marker") == "$want" ]]; then
		return 0
	fi
	need_cmd openjdk-17-jre-headless java
	need_cmd maven mvn
	local logf="$KAFKA_DIR/mvn.log"
	log "kafka: fetching Kafka $KAFKA_VERSION jars from Maven Central (log: $logf)"
	rm -rf "$KAFKA_LIB"
	mkdir -p "$KAFKA_LIB"
	if ! mvn -B -q -f "$pom" dependency:copy-dependencies -DincludeScope=runtime \
		-DoutputDirectory="$KAFKA_LIB" >"$logf" 2>&1; then
		show_tail "$logf"
		die "kafka: mvn dependency:copy-dependencies failed"
	fi
	[[ -f $KAFKA_LIB/kafka_2.13-$KAFKA_VERSION.jar ]] || die "kafka: kafka_2.13-$KAFKA_VERSION.jar missing after mvn (see $logf)"
	printf '%s' "$want" >"$marker"
}

kafka_java() { java -cp "$KAFKA_LIB/*" "$@"; }

kafka_start() {
	if kafka_ready; then
		if kafka_ours; then log "kafka already running (pid $(<"$KAFKA_PID"))"; else log "kafka: reusing broker already listening on $HOST:$KAFKA_PORT"; fi
		return 0
	fi
	if kafka_ours; then
		# Our process exists but the port is closed: still starting, or wedged.
		kafka_wait_ready "$(<"$KAFKA_PID")" 0
		return 0
	fi
	port_open "$KAFKA_CONTROLLER_PORT" && die "kafka: controller port $HOST:$KAFKA_CONTROLLER_PORT is taken by another process"
	kafka_libs
	need_cmd openjdk-17-jre-headless java
	mkdir -p "$KAFKA_DATA" "$KAFKA_LOGS"
	sed -e "s|@KAFKA_PORT@|$KAFKA_PORT|g" -e "s|@CONTROLLER_PORT@|$KAFKA_CONTROLLER_PORT|g" \
		-e "s|@DATA_DIR@|$KAFKA_DATA|g" "$SCRIPT_DIR/kafka/server.properties.tmpl" >"$KAFKA_PROPS"

	if [[ ! -f $KAFKA_DATA/meta.properties ]]; then
		local id fmtlog="$KAFKA_LOGS/format.log"
		# A half-formatted directory (interrupted format) is rebuilt from scratch.
		rm -rf "$KAFKA_DATA" && mkdir -p "$KAFKA_DATA"
		id=$(kafka_java kafka.tools.StorageTool random-uuid 2>"$fmtlog") || { show_tail "$fmtlog"; die "kafka: random-uuid failed"; }
		if ! kafka_java -Dlog4j2.configurationFile="$SCRIPT_DIR/kafka/log4j2.properties" -Dkafka.logs.dir="$KAFKA_LOGS" \
			kafka.tools.StorageTool format --standalone -t "$id" -c "$KAFKA_PROPS" >>"$fmtlog" 2>&1; then
			show_tail "$fmtlog"
			die "kafka: storage format failed"
		fi
		log "kafka: formatted storage (cluster id $id)"
	fi

	local logfile="$KAFKA_LOGS/server.log" offset=0 pid
	[[ -f $logfile ]] && offset=$(stat -c %s "$logfile")
	# setsid: own session, so the broker survives the calling shell and its
	# process group (test runners, CI steps) being killed.
	setsid nohup java -Xms1g -Xmx1g -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true \
		-Dlog4j2.configurationFile="$SCRIPT_DIR/kafka/log4j2.properties" -Dkafka.logs.dir="$KAFKA_LOGS" \
		-cp "$KAFKA_LIB/*" kafka.Kafka "$KAFKA_PROPS" >>"$KAFKA_LOGS/kafka.out" 2>&1 </dev/null 9>&- &
	pid=$!
	echo "$pid" >"$KAFKA_PID"
	kafka_wait_ready "$pid" "$offset"
}

# log_has_after FILE OFFSET TEXT: whether FILE holds TEXT after its first
# OFFSET bytes. tail feeds grep through a process substitution, not a
# pipeline: grep -q stops at the match, which ends tail with SIGPIPE while
# a long log is still being written to it, and under pipefail a pipeline
# would then fail although TEXT is there.
log_has_after() {
	grep -qF -- "$3" < <(tail -c +"$(($2 + 1))" "$1")
}

# kafka_wait_ready PID LOG_OFFSET: wait for "Kafka Server started" in the log
# written after LOG_OFFSET and for the client port to accept connections.
kafka_wait_ready() {
	local pid=$1 offset=$2 logfile="$KAFKA_LOGS/server.log" deadline=$((SECONDS + KAFKA_START_TIMEOUT)) started=0
	while ((SECONDS < deadline)); do
		if [[ ! -d /proc/$pid ]]; then
			rm -f "$KAFKA_PID"
			show_tail "$KAFKA_LOGS/kafka.out" 20
			show_tail "$logfile"
			die "kafka exited during startup"
		fi
		if ((!started)) && [[ -f $logfile ]] && log_has_after "$logfile" "$offset" 'Kafka Server started'; then
			started=1
		fi
		if ((started)) && kafka_ready; then
			log "kafka started (pid $pid, Kafka $KAFKA_VERSION)"
			return 0
		fi
		sleep 0.25
	done
	show_tail "$KAFKA_LOGS/kafka.out" 20
	show_tail "$logfile"
	die "kafka not ready after ${KAFKA_START_TIMEOUT}s (pid $pid still running; 'scripts/deps.sh stop kafka' to stop it)"
}

kafka_stop() { stop_pid kafka "$KAFKA_PID" kafka.Kafka TERM; }

# -------------------------------------------------------------- MariaDB

mysql_tcp() { # run the mariadb client over TCP as the test user
	"$(first_cmd mariadb mysql)" --no-defaults --protocol=TCP -h "$HOST" -P "$MYSQL_PORT" \
		-u "$MYSQL_USER" -p"$MYSQL_PASSWORD" --connect-timeout=2 "$@"
}
mysql_root() { # run the mariadb client as root over our own socket
	"$(first_cmd mariadb mysql)" --no-defaults --socket="$MYSQL_SOCK" -u root --connect-timeout=2 "$@"
}
mysql_ours() { pid_alive "$MYSQL_PID" "$MYSQL_DATA"; }
# mariadb-admin ping exits 0 even on "Access denied", so run a query instead.
mysql_ready() { command -v mariadb >/dev/null 2>&1 || command -v mysql >/dev/null 2>&1 || return 1; mysql_tcp -N -e 'SELECT 1' "$MYSQL_DB" >/dev/null 2>&1; }

mysql_bootstrap() {
	mysql_root <<SQL
CREATE DATABASE IF NOT EXISTS \`$MYSQL_DB\`;
CREATE USER IF NOT EXISTS '$MYSQL_USER'@'%' IDENTIFIED BY '$MYSQL_PASSWORD';
CREATE USER IF NOT EXISTS '$MYSQL_USER'@'localhost' IDENTIFIED BY '$MYSQL_PASSWORD';
GRANT ALL PRIVILEGES ON *.* TO '$MYSQL_USER'@'%' WITH GRANT OPTION;
GRANT ALL PRIVILEGES ON *.* TO '$MYSQL_USER'@'localhost' WITH GRANT OPTION;
SQL
}

mysql_start() {
	if mysql_ready; then
		if mysql_ours; then log "mariadb already running (pid $(<"$MYSQL_PID"))"; else log "mariadb: reusing server already answering on $HOST:$MYSQL_PORT"; fi
		return 0
	fi
	need_cmd mariadb-server mariadbd mysqld
	local server install_db pid deadline
	server=$(first_cmd mariadbd mysqld || true)
	[[ -n $server ]] || server=$(ls /usr/sbin/mariadbd /usr/sbin/mysqld 2>/dev/null | head -n1)
	[[ -n $server ]] || die "mariadb: no mariadbd/mysqld binary after installing mariadb-server"
	if ! mysql_ours; then
		port_open "$MYSQL_PORT" && die "mariadb: $HOST:$MYSQL_PORT is taken by a server where $MYSQL_USER/$MYSQL_PASSWORD cannot log in (stop it, or set NOTIFLOW_DEPS_MYSQL_PORT)"
		mkdir -p "$MYSQL_DIR"
		if [[ ! -d $MYSQL_DATA/mysql ]]; then
			install_db=$(first_cmd mariadb-install-db mysql_install_db) || die "mariadb: mariadb-install-db not found"
			log "mariadb: initialising $MYSQL_DATA"
			rm -rf "$MYSQL_DATA"
			if ! "$install_db" --no-defaults --datadir="$MYSQL_DATA" --user=root \
				--auth-root-authentication-method=socket --skip-test-db >"$MYSQL_DIR/install-db.log" 2>&1; then
				show_tail "$MYSQL_DIR/install-db.log"
				die "mariadb: $install_db failed"
			fi
		fi
		# --no-defaults: ignore /etc/mysql. Charset matches Debian's packaged
		# defaults (utf8mb4); durability settings stay at the server defaults.
		# Memory sizing is not durability: a buffer pool that holds a large
		# run's tables and a redo log that does not force a checkpoint every
		# few seconds of writes.
		setsid nohup "$server" --no-defaults --user=root --datadir="$MYSQL_DATA" \
			--socket="$MYSQL_SOCK" --pid-file="$MYSQL_PID" --log-error="$MYSQL_LOG" \
			--port="$MYSQL_PORT" --bind-address="$HOST" --skip-name-resolve \
			--max-connections=500 --character-set-server=utf8mb4 --collation-server=utf8mb4_general_ci \
			--innodb-buffer-pool-size="$MYSQL_BUFFER_POOL" --innodb-log-file-size="$MYSQL_REDO_LOG" \
			>>"$MYSQL_DIR/mariadbd.out" 2>&1 </dev/null 9>&- &
		pid=$!
		echo "$pid" >"$MYSQL_PID"
	fi
	pid=$(<"$MYSQL_PID")
	deadline=$((SECONDS + MYSQL_START_TIMEOUT))
	until mysql_root -N -e 'SELECT 1' >/dev/null 2>&1; do
		if [[ ! -d /proc/$pid ]]; then
			rm -f "$MYSQL_PID"
			show_tail "$MYSQL_DIR/mariadbd.out" 10
			show_tail "$MYSQL_LOG"
			die "mariadb exited during startup"
		fi
		((SECONDS < deadline)) || { show_tail "$MYSQL_LOG"; die "mariadb not ready after ${MYSQL_START_TIMEOUT}s"; }
		sleep 0.2
	done
	mysql_bootstrap || die "mariadb: creating database/user failed"
	mysql_ready || die "mariadb: $MYSQL_USER cannot log in over TCP $HOST:$MYSQL_PORT"
	log "mariadb started (pid $pid, $(mysql_tcp -N -e 'SELECT VERSION()'))"
}

mysql_stop() { stop_pid mariadb "$MYSQL_PID" "$MYSQL_DATA" TERM; }

# ---------------------------------------------------------------- Redis

redis_ours() { pid_alive "$REDIS_PID" "redis-server"; }
redis_ready() { command -v redis-cli >/dev/null 2>&1 && [[ $(timeout 2 redis-cli -h "$HOST" -p "$REDIS_PORT" ping 2>/dev/null) == PONG ]]; }

redis_start() {
	if redis_ready; then
		if redis_ours; then log "redis already running (pid $(<"$REDIS_PID"))"; else log "redis: reusing server already answering on $HOST:$REDIS_PORT"; fi
		return 0
	fi
	need_cmd redis-server redis-server
	need_cmd redis-tools redis-cli
	port_open "$REDIS_PORT" && die "redis: $HOST:$REDIS_PORT is taken by something that does not answer PING"
	redis_ours && stop_pid redis "$REDIS_PID" redis-server TERM # alive but not answering
	mkdir -p "$REDIS_DIR"
	cat >"$REDIS_CONF" <<EOF
# generated by scripts/deps.sh
bind $HOST
port $REDIS_PORT
daemonize yes
pidfile $REDIS_PID
logfile $REDIS_LOG
dir $REDIS_DIR
save ""
appendonly no
EOF
	rm -f "$REDIS_PID"
	if ! redis-server "$REDIS_CONF" >>"$REDIS_DIR/redis.out" 2>&1 9>&-; then
		show_tail "$REDIS_DIR/redis.out" 10
		show_tail "$REDIS_LOG"
		die "redis-server failed to start"
	fi
	local i
	for ((i = 0; i < 100; i++)); do
		redis_ready && break
		sleep 0.1
	done
	redis_ready || { show_tail "$REDIS_LOG"; die "redis not answering PING on $HOST:$REDIS_PORT"; }
	log "redis started (pid $(<"$REDIS_PID"), $(redis-server --version | grep -o 'v=[^ ]*'))"
}

redis_stop() { stop_pid redis "$REDIS_PID" redis-server TERM; }

# ------------------------------------------------------------- commands

# Serialise concurrent invocations (parallel test packages, CI steps). The
# daemons are started with fd 9 closed so they do not inherit the lock.
lock() {
	mkdir -p "$DEPS"
	exec 9>"$DEPS/deps.lock"
	flock -w 600 9 || die "timed out waiting for another deps.sh run ($DEPS/deps.lock)"
}

svc() { # canonical service name
	case ${1:-} in
	kafka) echo kafka ;;
	mariadb | mysql) echo mysql ;;
	redis) echo redis ;;
	*) die "unknown service '${1:-}' (kafka|mariadb|redis)" ;;
	esac
}

where() {
	log "kafka $HOST:$KAFKA_PORT"
	log "mysql $MYSQL_USER:***@$HOST:$MYSQL_PORT/$MYSQL_DB"
	log "redis $HOST:$REDIS_PORT"
}

status_line() { # status_line NAME ADDR READY OURS PIDFILE
	local name=$1 addr=$2 ready=$3 ours=$4 pidfile=$5
	if $ready; then
		if $ours; then printf '%-8s up      %-22s (started by deps.sh, pid %s)\n' "$name" "$addr" "$(<"$pidfile")"; else printf '%-8s up      %-22s (external)\n' "$name" "$addr"; fi
		return 0
	elif $ours; then
		printf '%-8s DOWN    %-22s (pid %s alive but not answering)\n' "$name" "$addr" "$(<"$pidfile")"
	else
		printf '%-8s DOWN    %-22s\n' "$name" "$addr"
	fi
	return 1
}

cmd_status() {
	local rc=0
	status_line kafka "$HOST:$KAFKA_PORT" kafka_ready kafka_ours "$KAFKA_PID" || rc=1
	status_line mariadb "$HOST:$MYSQL_PORT" mysql_ready mysql_ours "$MYSQL_PID" || rc=1
	status_line redis "$HOST:$REDIS_PORT" redis_ready redis_ours "$REDIS_PID" || rc=1
	return $rc
}

cmd_env() {
	printf "export NOTIFLOW_TEST_KAFKA='%s'\n" "$HOST:$KAFKA_PORT"
	printf "export NOTIFLOW_TEST_MYSQL_DSN='%s'\n" "$MYSQL_USER:$MYSQL_PASSWORD@tcp($HOST:$MYSQL_PORT)/$MYSQL_DB?parseTime=true&loc=UTC&multiStatements=true"
	printf "export NOTIFLOW_TEST_REDIS='%s'\n" "$HOST:$REDIS_PORT"
}

usage() {
	sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}" >&2
	exit 2
}

main() {
	local cmd=${1:-}
	case $cmd in
	up)
		lock
		kafka_start
		mysql_start
		redis_start
		where
		;;
	down)
		lock
		kafka_stop
		mysql_stop
		redis_stop
		;;
	start | stop)
		[[ $# -eq 2 ]] || usage
		local s
		s=$(svc "$2")
		lock
		if [[ $cmd == stop ]] && ! "${s}_ours" && "${s}_ready"; then
			die "$2 is running but was not started by deps.sh; not stopping it"
		fi
		"${s}_$cmd"
		;;
	status) cmd_status ;;
	env) cmd_env ;;
	kafka-libs)
		lock
		kafka_libs >&2
		echo "$KAFKA_LIB"
		;;
	-h | --help | help | "") usage ;;
	*)
		warn "unknown command '$cmd'"
		usage
		;;
	esac
}

# Sourced (tests of its functions, in a shell of their own: it sets
# errexit and pipefail), it only defines them.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
	main "$@"
fi
