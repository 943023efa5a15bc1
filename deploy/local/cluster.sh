#!/usr/bin/env bash
# A local Tabula cluster on loopback, for people (tests start their own
# servers through deploy/test.sh):
#
#   deploy/local/cluster.sh up [--deps-only] [--tls] [--tabletservers N] [--workers N] [--split-size B]
#                                              start it and print how to use it
#   deploy/local/cluster.sh status             each process: alive or dead, pid, addresses
#   deploy/local/cluster.sh down               stop it (idempotent)
#
# up
#   1. installs MinIO and Consul through deploy/install.sh (built once into
#      .cache/bin) and builds tabula into .cache/bin/tabula;
#   2. starts, in the state directory ($TABULA_CLUSTER_DIR, default
#      .cache/cluster), on free 127.0.0.1 ports:
#        consul          one agent in -dev mode (a single server)
#        minio           with random root credentials, which the Tabula
#                        processes get as AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY
#        master-1, master-2                      tabula master
#        tabletserver-1 .. tabletserver-N        tabula tabletserver (N: 3, or
#                                                --tabletservers N)
#        worker-1 .. worker-N                    tabula worker, MapReduce workers
#                                                registered in Consul (N: 2, or
#                                                --workers N; 0: none)
#      each in the background, detached from the terminal, with its log in
#      NAME.log and "pid exe addr http" in NAME.proc;
#   3. waits until Consul has a leader, MinIO is live and every tablet
#      server's and worker's /healthz answers 200, then prints the client address
#      (BIGTABLE_EMULATOR_HOST) and the status pages, and writes them to
#      env, a file to source.
#   If a step fails, up stops what it started and shows the failing log.
#   --deps-only starts Consul and MinIO alone, for running the Tabula roles
#   by hand (from a debugger, say) against them: source env for their
#   addresses. --tabletservers N starts N tablet servers instead of 3;
#   --split-size B makes tablets split past B bytes (the tablet servers'
#   and masters' --split-size) instead of the default, so that a small
#   table spreads over the servers.
#   --tls makes a CA and certificates with `tabula certs` in DIR/tls (the
#   server certificate, and a client certificate for principal "admin"),
#   serves MinIO over HTTPS with them, and runs every Tabula role with
#   mutual TLS on its gRPC and HTTP ports (--tls-cert, --tls-key,
#   --tls-client-ca); env then holds TABULA_TLS_CA, TABULA_TLS_CERT and
#   TABULA_TLS_KEY for the CLI, and the store URL names the CA.
#
# Consul's -dev mode keeps its state in memory, so the lock service starts
# empty on every up; the object store is emptied too, since tablet data
# without its lock-service state (epochs, assignments) would be inconsistent.
# down leaves the logs in the state directory.
#
# Environment: TABULA_CLUSTER_DIR (state directory),
# TABULA_CLUSTER_START_TIMEOUT (seconds to wait for each server, default 60),
# TABULA_CLUSTER_BINARY (a tabula binary to run instead of building one),
# TABULA_CLUSTER_TABLETSERVERS, TABULA_CLUSTER_WORKERS and
# TABULA_CLUSTER_SPLIT_SIZE (defaults of --tabletservers, --workers and
# --split-size).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BIN=$REPO/.cache/bin
DIR=${TABULA_CLUSTER_DIR:-$REPO/.cache/cluster}
TIMEOUT=${TABULA_CLUSTER_START_TIMEOUT:-60}
CLUSTER=local
BUCKET=tabula
MASTERS=2
TABLETSERVERS=${TABULA_CLUSTER_TABLETSERVERS:-3}
WORKERS=${TABULA_CLUSTER_WORKERS:-2}
SPLIT_SIZE=${TABULA_CLUSTER_SPLIT_SIZE:-}
TLS=false
STOP_GRACE=10 # seconds between SIGTERM and SIGKILL
TABULA=$BIN/tabula

log() { echo "cluster: $*" >&2; }
die() {
	log "$*"
	exit 1
}

# The processes in start order; down stops them in reverse. Tablet servers
# beyond TABLETSERVERS count while their .proc files exist, so that status
# and down see every server of a cluster started with more.
names() {
	local i
	echo consul minio
	for ((i = 1; i <= MASTERS; i++)); do echo "master-$i"; done
	for ((i = 1; ; i++)); do
		((i <= TABLETSERVERS)) || [[ -f $DIR/tabletserver-$i.proc ]] || break
		echo "tabletserver-$i"
	done
	for ((i = 1; ; i++)); do
		((i <= WORKERS)) || [[ -f $DIR/worker-$i.proc ]] || break
		echo "worker-$i"
	done
}

# proc NAME: set PID EXE ADDR HTTP from NAME.proc; false if there is none.
proc() {
	local f=$DIR/$1.proc
	PID= EXE= ADDR= HTTP=
	[[ -f $f ]] || return 1
	read -r PID EXE ADDR HTTP <"$f" || true
	[[ -n $PID ]]
}

# alive NAME: whether NAME's recorded process is running. The pid must still
# be the program that was started (pids are reused), judged by its
# command line where /proc has one.
alive() {
	proc "$1" || return 1
	kill -0 "$PID" 2>/dev/null || return 1
	if [[ -r /proc/$PID/cmdline ]]; then
		local argv0
		argv0=$(tr '\0' '\n' <"/proc/$PID/cmdline" 2>/dev/null | head -n 1)
		[[ $argv0 == "$EXE" ]] || return 1
	fi
	return 0
}

# launch NAME ADDR HTTP EXE ARGS...: start a server in the background, in a
# session of its own so it outlives the terminal, and record it.
launch() {
	local name=$1 addr=$2 http=$3
	shift 3
	local pid i
	setsid "$@" </dev/null >"$DIR/$name.log" 2>&1 &
	pid=$!
	echo "$pid $1 $addr $http" >"$DIR/$name.proc"
	# Until the child has exec'd the program, its command line is still
	# bash's or setsid's, and alive would call it dead.
	for ((i = 0; i < 50; i++)); do
		[[ -r /proc/$pid/cmdline ]] || break
		[[ $(tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | head -n 1) == "$1" ]] && break
		sleep 0.02
	done
}

# failed NAME: report that NAME did not come up, with the end of its log.
failed() {
	log "$1 did not come up; the end of $DIR/$1.log:"
	tail -n 30 "$DIR/$1.log" >&2 || true
	return 1
}

# stop_all: SIGTERM every recorded process still alive, SIGKILL those
# alive STOP_GRACE seconds later; the Tabula roles first, so they can still
# reach Consul and MinIO while they shut down. Removes the .proc files.
stop_all() {
	local group name left i
	local -a tabula=() deps=()
	for name in $(names); do
		case $name in
		consul | minio) deps+=("$name") ;;
		*) tabula+=("$name") ;;
		esac
	done
	for group in tabula deps; do
		local -n members=$group
		left=()
		for name in "${members[@]}"; do
			if alive "$name"; then
				log "stopping $name (pid $PID)"
				kill -TERM "$PID" 2>/dev/null || true
				left+=("$name")
			fi
		done
		for ((i = 0; i < STOP_GRACE * 10 && ${#left[@]} > 0; i++)); do
			sleep 0.1
			local -a still=()
			for name in "${left[@]}"; do
				alive "$name" && still+=("$name")
			done
			left=("${still[@]}")
		done
		for name in "${left[@]}"; do
			if alive "$name"; then
				log "$name (pid $PID) still running after ${STOP_GRACE}s: SIGKILL"
				kill -KILL "$PID" 2>/dev/null || true
			fi
		done
		unset -n members
	done
	for name in $(names); do
		rm -f "$DIR/$name.proc"
	done
}

random_hex() { od -An -tx1 -N"$1" /dev/urandom | tr -d ' \n'; }

# consul_leader PORT: the leader the agent's HTTP API on 127.0.0.1:PORT
# reports ("" during the election), over bash's /dev/tcp (no curl needed).
consul_leader() {
	local body
	exec 3<>"/dev/tcp/127.0.0.1/$1" || return 1
	printf 'GET /v1/status/leader HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
	body=$(cat <&3)
	exec 3<&-
	printf '%s' "${body##*$'\r\n\r\n'}" | tr -d '"'
}

# wait_until NAME CMD...: run CMD every 0.2 s until it succeeds, failing if
# NAME dies or TIMEOUT seconds pass.
wait_until() {
	local name=$1 deadline=$((SECONDS + TIMEOUT))
	shift
	while ((SECONDS < deadline)); do
		alive "$name" || {
			log "$name exited"
			return 1
		}
		"$@" 2>/dev/null && return 0
		sleep 0.2
	done
	log "$name not ready after ${TIMEOUT}s"
	return 1
}

# healthy URL: one quick GET that must answer 200 (over HTTPS with the
# cluster's CA and client certificate under --tls).
healthy() {
	if $TLS; then
		"$DIR/testenv" wait-http "$1" 2s "$DIR/tls/ca.crt" "$DIR/tls/client-admin.crt" "$DIR/tls/client-admin.key"
	else
		"$DIR/testenv" wait-http "$1" 2s
	fi
}

# scheme: the URL scheme of the servers' HTTP ports.
scheme() { if $TLS; then echo https; else echo http; fi; }

has_leader() { [[ -n $(consul_leader "$1") ]]; }

# take_ports N: set PORTS to N distinct free loopback ports. Another program
# can still take one before our server binds it; the server then fails to
# start and up reports it: run up again.
take_ports() {
	mapfile -t PORTS < <("$DIR/testenv" free-ports "$1")
	((${#PORTS[@]} == $1)) || die "could not find $1 free ports"
}

start_consul() {
	local http=$1 serf_lan=$2 serf_wan=$3 server=$4
	rm -rf "$DIR/consul-data" && mkdir -p "$DIR/consul-data"
	# Dev mode would take fixed ports (8500, 8600, 8300-8302, 8502-8503):
	# the ones a server binds get free ports, DNS and gRPC (unused) are off.
	CHECKPOINT_DISABLE=1 launch consul "127.0.0.1:$http" - "$BIN/consul" agent -dev -node tabula-local \
		-bind 127.0.0.1 -client 127.0.0.1 -advertise 127.0.0.1 \
		-http-port "$http" -dns-port -1 -grpc-port -1 -grpc-tls-port -1 \
		-serf-lan-port "$serf_lan" -serf-wan-port "$serf_wan" -server-port "$server" \
		-data-dir "$DIR/consul-data"
	wait_until consul has_leader "$http" || failed consul
	log "Consul on 127.0.0.1:$http"
}

start_minio() {
	local port=$1 console=$2
	rm -rf "$DIR/minio-data" && mkdir -p "$DIR/minio-data"
	# MINIO_CI_CD relaxes checks meant for production drives; the console,
	# update checks and telemetry are off.
	local -a tls=()
	$TLS && tls=(--certs-dir "$DIR/tls/minio")
	MINIO_ROOT_USER=$AWS_ACCESS_KEY_ID MINIO_ROOT_PASSWORD=$AWS_SECRET_ACCESS_KEY \
		MINIO_CI_CD=1 MINIO_BROWSER=off MINIO_UPDATE=off \
		launch minio "127.0.0.1:$port" - "$BIN/minio" server --quiet "${tls[@]}" \
		--address "127.0.0.1:$port" --console-address "127.0.0.1:$console" \
		"$DIR/minio-data"
	wait_until minio healthy "$(scheme)://127.0.0.1:$port/minio/health/live" || failed minio
	log "MinIO on 127.0.0.1:$port"
}

# start_role ROLE NAME PORT HTTPPORT: start tabula master or tabletserver.
start_role() {
	local role=$1 name=$2 addr=127.0.0.1:$3 http=127.0.0.1:$4
	local -a extra=()
	# Both roles take it: the masters weigh tablets by it when balancing.
	[[ -n $SPLIT_SIZE ]] && extra+=(--split-size "$SPLIT_SIZE")
	# A tablet server restarted on its port finds its predecessor's
	# succession lock here, and the master recovers that one's tablets at
	# once (RELIABILITY item 38).
	[[ $role == tabletserver ]] && extra+=(--lock-dir "$DIR")
	extra+=("${ROLE_TLS[@]}")
	launch "$name" "$addr" "$http" "$TABULA" "$role" \
		--consul "$CONSUL" --store "$STORE" \
		--addr "$addr" --cluster "$CLUSTER" --http "$http" "${extra[@]}"
}

# start_worker NAME PORT HTTPPORT: start a tabula worker (no store: it
# keeps map outputs in its own directory).
start_worker() {
	local name=$1 addr=127.0.0.1:$2 http=127.0.0.1:$3
	mkdir -p "$DIR/$name"
	launch "$name" "$addr" "$http" "$TABULA" worker \
		--consul "$CONSUL" --addr "$addr" --cluster "$CLUSTER" --http "$http" --dir "$DIR/$name" "${ROLE_TLS[@]}"
}

cmd_up() {
	local deps_only=false name i
	local usage="usage: $0 up [--deps-only] [--tls] [--tabletservers N] [--workers N] [--split-size BYTES]"
	while (($# > 0)); do
		case $1 in
		--deps-only) deps_only=true ;;
		--tls) TLS=true ;;
		--tabletservers)
			(($# >= 2)) || die "$usage"
			TABLETSERVERS=$2
			shift
			;;
		--split-size)
			(($# >= 2)) || die "$usage"
			SPLIT_SIZE=$2
			shift
			;;
		--workers)
			(($# >= 2)) || die "$usage"
			WORKERS=$2
			shift
			;;
		--workers=*) WORKERS=${1#*=} ;;
		--tabletservers=*) TABLETSERVERS=${1#*=} ;;
		--split-size=*) SPLIT_SIZE=${1#*=} ;;
		*) die "$usage" ;;
		esac
		shift
	done
	[[ $TABLETSERVERS =~ ^[1-9][0-9]*$ ]] || die "--tabletservers: want a positive number, not '$TABLETSERVERS'"
	[[ $WORKERS =~ ^[0-9]+$ ]] || die "--workers: want a number, not '$WORKERS'"
	[[ -z $SPLIT_SIZE || $SPLIT_SIZE =~ ^[1-9][0-9]*$ ]] || die "--split-size: want a positive number of bytes, not '$SPLIT_SIZE'"
	mkdir -p "$DIR"
	for name in $(names); do
		if alive "$name"; then
			die "already running ($name, pid $PID): see $0 status, or $0 down first"
		fi
	done
	stop_all 2>/dev/null # stale .proc files of a cluster that died

	bash "$REPO/deploy/install.sh" all
	go build -C "$REPO" -o "$DIR/testenv" ./deploy/testenv
	if $deps_only && ! $TLS; then
		:
	elif [[ -n ${TABULA_CLUSTER_BINARY:-} ]]; then
		TABULA=$(realpath -e "$(type -P "$TABULA_CLUSTER_BINARY")" 2>/dev/null) || die "TABULA_CLUSTER_BINARY=$TABULA_CLUSTER_BINARY: not an executable"
		log "using $TABULA"
	else
		log "building tabula"
		go build -C "$REPO" -o "$BIN/tabula" ./cmd/tabula
	fi

	ROLE_TLS=()
	if $TLS; then
		rm -rf "$DIR/tls"
		"$TABULA" certs --dir "$DIR/tls" --client admin >/dev/null
		mkdir -p "$DIR/tls/minio"
		cp "$DIR/tls/server.crt" "$DIR/tls/minio/public.crt"
		cp "$DIR/tls/server.key" "$DIR/tls/minio/private.key"
		ROLE_TLS=(--tls-cert "$DIR/tls/server.crt" --tls-key "$DIR/tls/server.key" --tls-client-ca "$DIR/tls/ca.crt")
		log "certificates in $DIR/tls"
	fi

	# From here on, a failure stops whatever was started.
	trap 'rc=$?; if ((rc != 0)); then log "up failed: stopping what was started"; stop_all; fi' EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM

	take_ports $((4 + 2 + 2 * (MASTERS + TABLETSERVERS + WORKERS)))
	local -a p=("${PORTS[@]}")

	export AWS_ACCESS_KEY_ID=tabula-$(random_hex 6)
	export AWS_SECRET_ACCESS_KEY=$(random_hex 20)
	start_consul "${p[0]}" "${p[1]}" "${p[2]}" "${p[3]}"
	start_minio "${p[4]}" "${p[5]}"
	CONSUL=127.0.0.1:${p[0]}
	STORE="s3://$BUCKET?endpoint=127.0.0.1:${p[4]}&secure=false"
	$TLS && STORE="s3://$BUCKET?endpoint=127.0.0.1:${p[4]}&secure=true&ca=$DIR/tls/ca.crt"

	local k=6
	if ! $deps_only; then
		for ((i = 1; i <= MASTERS; i++)); do
			start_role master "master-$i" "${p[k]}" "${p[k + 1]}"
			k=$((k + 2))
		done
		for ((i = 1; i <= TABLETSERVERS; i++)); do
			start_role tabletserver "tabletserver-$i" "${p[k]}" "${p[k + 1]}"
			k=$((k + 2))
		done
		for ((i = 1; i <= WORKERS; i++)); do
			start_worker "worker-$i" "${p[k]}" "${p[k + 1]}"
			k=$((k + 2))
		done
		for ((i = 1; i <= TABLETSERVERS; i++)); do
			name=tabletserver-$i
			proc "$name"
			wait_until "$name" healthy "$(scheme)://$HTTP/healthz" || failed "$name"
			log "$name on $ADDR healthy"
		done
		for ((i = 1; i <= WORKERS; i++)); do
			name=worker-$i
			proc "$name"
			wait_until "$name" healthy "$(scheme)://$HTTP/healthz" || failed "$name"
			log "$name on $ADDR healthy"
		done
		# The masters are not waited for (one of them stands by), but
		# must not have died meanwhile.
		for ((i = 1; i <= MASTERS; i++)); do
			alive "master-$i" || failed "master-$i"
		done
	fi
	trap - EXIT INT TERM

	write_env "$deps_only"
	echo
	echo "Tabula cluster '$CLUSTER' is up; state, logs and pids in $DIR."
	echo
	if ! $deps_only; then
		proc tabletserver-1
		if $TLS; then
			echo "Clients: TLS with a client certificate (the emulator variable is plaintext only);"
			echo "  the tabula CLI reads TABULA_TLS_CA, TABULA_TLS_CERT, TABULA_TLS_KEY from $DIR/env"
		else
			echo "Clients (cbt, the Cloud Bigtable clients):"
			echo "  export BIGTABLE_EMULATOR_HOST=$ADDR"
		fi
		echo "The tabula CLI (tabula ls, tabula bench, ...):"
		echo "  export TABULA_ADDR=$ADDR"
		if ((WORKERS > 0)); then
			echo "MapReduce on the $WORKERS workers:"
			echo "  tabula mr run rowcounter TABLE --workers-consul $CONSUL --workers-cluster $CLUSTER"
		fi
		echo
		echo "Status pages:"
		for name in $(names); do
			case $name in
			master-* | tabletserver-* | worker-*)
				proc "$name"
				printf '  %-15s %s://%s/status\n' "$name" "$(scheme)" "$HTTP"
				;;
			esac
		done
		echo
	fi
	echo "Consul:  http://$CONSUL/ui/"
	echo "Store:   $STORE"
	echo "All of it, credentials included:  source $DIR/env"
	echo "Stop with:  $0 down"
}

# write_env DEPS_ONLY: the addresses and credentials as shell exports.
write_env() {
	{
		echo "# Written by deploy/local/cluster.sh up; source it."
		if ! $1; then
			proc tabletserver-1
			echo "export BIGTABLE_EMULATOR_HOST=$ADDR"
			echo "export TABULA_ADDR=$ADDR # the tabula CLI's --addr"
		fi
		echo "export CONSUL_HTTP_ADDR=$CONSUL"
		echo "export TABULA_CONSUL=$CONSUL"
		echo "export TABULA_STORE='$STORE'"
		echo "export AWS_ACCESS_KEY_ID=$AWS_ACCESS_KEY_ID"
		echo "export AWS_SECRET_ACCESS_KEY=$AWS_SECRET_ACCESS_KEY"
		if $TLS; then
			echo "export TABULA_TLS_CA=$DIR/tls/ca.crt"
			echo "export TABULA_TLS_CERT=$DIR/tls/client-admin.crt"
			echo "export TABULA_TLS_KEY=$DIR/tls/client-admin.key"
			echo "export AWS_CA_BUNDLE=$DIR/tls/ca.crt # MinIO's CA, for s3:// locations"
		fi
	} >"$DIR/env"
}

cmd_status() {
	local name state any=false dead=0
	for name in $(names); do
		proc "$name" || continue
		if ! $any; then
			printf '%-15s %-6s %-8s %-22s %s\n' NAME STATE PID ADDR HTTP
			any=true
		fi
		if alive "$name"; then
			state=alive
		else
			state=dead
			dead=$((dead + 1))
		fi
		[[ $HTTP == - ]] && HTTP=
		printf '%-15s %-6s %-8s %-22s %s\n' "$name" "$state" "$PID" "$ADDR" "${HTTP:+http://$HTTP/status}"
	done
	if ! $any; then
		echo "no cluster in $DIR (start one with $0 up)"
		exit 3
	fi
	if ((dead > 0)); then
		echo "$dead dead: logs in $DIR/NAME.log"
		exit 1
	fi
}

cmd_down() {
	if [[ ! -d $DIR ]]; then
		log "no cluster in $DIR"
		return 0
	fi
	stop_all
	rm -f "$DIR/env"
	log "stopped; logs stay in $DIR"
}

main() {
	local cmd=${1:-}
	shift || true
	case $cmd in
	up) cmd_up "$@" ;;
	status) cmd_status ;;
	down) cmd_down ;;
	*)
		echo "usage: $0 up [--deps-only] [--tls] [--tabletservers N] [--workers N] [--split-size BYTES] | status | down" >&2
		exit 2
		;;
	esac
}

main "$@"
