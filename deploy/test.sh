#!/usr/bin/env bash
# Tabula's test command — the one the README gives and .ci/run calls:
#
#   bash deploy/test.sh [go test flags] [packages]
#
# It
#   1. installs MinIO through deploy/install.sh (built once into .cache/bin);
#   2. makes a test CA and a certificate for 127.0.0.1 (testenv certs), starts
#      MinIO on 127.0.0.1 on free random ports over HTTPS with that
#      certificate (--certs-dir), with a temporary data directory and random
#      root credentials, and exports for the tests
#        TABULA_TEST_S3_ENDPOINT    host:port (HTTPS)
#        TABULA_TEST_S3_CA          the PEM CA file that signs its certificate
#        TABULA_TEST_S3_ACCESS_KEY
#        TABULA_TEST_S3_SECRET_KEY
#      then installs Consul the same way, starts a single dev-mode agent on
#      127.0.0.1 (free ports, temporary data directory) with ACLs enabled and
#      default deny, a management token bootstrapped from the configuration,
#      waits until it has elected itself leader, creates the policy of
#      deploy/consul-policy.hcl and a token holding only it, and exports
#        TABULA_TEST_CONSUL_ADDR    host:port of its HTTP API
#        TABULA_TEST_CONSUL_HTTPS_ADDR  host:port of the same API over HTTPS
#                                   (the test CA's certificate for 127.0.0.1)
#        TABULA_TEST_CONSUL_CA      the PEM CA file that signs it
#        TABULA_TEST_CONSUL_TOKEN   the minimal-policy token (the management
#                                   token stays in this script)
#        CONSUL_HTTP_TOKEN          the same, for every Consul client
#      and finds headless Chromium (the browser the status page tests
#      render in): $TABULA_TEST_CHROMIUM if set, else chromium or
#      chromium-browser on PATH, else it installs Debian's chromium package
#      with apt-get (through sudo unless root); it exports
#        TABULA_TEST_CHROMIUM       path of the browser
#      and installs DuckDB for Node (npm @duckdb/node-api at a pinned
#      version, whose linux-x64 bindings package ships the library) once
#      into .cache/npm — Node and npm from Debian's packages with apt-get if
#      node is missing — and exports
#        TABULA_TEST_DUCKDB_NODE_PATH   NODE_PATH holding @duckdb/node-api
#   3. checks formatting (gofmt -l, generated files excepted) and go vet;
#   4. runs go test -tags integration -count=1 with the arguments given
#      (default packages: ./...; give package paths like ./storage/blob/... to
#      test only those, and they are also what go vet checks);
#   5. stops MinIO and Consul and removes the temporary directories,
#      whatever happened, and exits with the status of the first failing step.
#
# Integration tests are the files tagged //go:build integration; they use the
# servers started here and fail (never skip) without them.
#
# Long runs stay out of this command. Fuzz targets run explicitly, e.g.
#   go test -run '^$' -fuzz FuzzReader -fuzztime 1m ./storage/sstable
# and tests with a long mode (soak, many-kill crash runs) read TABULA_LONG=1:
#   TABULA_LONG=1 bash deploy/test.sh -run Soak ./storage/...
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
BIN=$REPO/.cache/bin
MINIO_START_TIMEOUT=${MINIO_START_TIMEOUT:-60s}
CONSUL_START_TIMEOUT=${CONSUL_START_TIMEOUT:-60}

log() { echo "test.sh: $*" >&2; }

TMP=$(mktemp -d "${TMPDIR:-/tmp}/tabula-test.XXXXXX")
MINIO_PID=
CONSUL_PID=

# stop_pid PID: TERM, then KILL if it lingers.
stop_pid() {
	local pid=$1
	kill -TERM "$pid" 2>/dev/null || return 0
	for _ in $(seq 50); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
}

# disk_free_mib: MiB free to writers on the filesystem of $TMP (MinIO's
# data directory; Go's build cache is usually on the same disk).
disk_free_mib() { df -Pm "$TMP" | awk 'NR == 2 { print $4 }'; }

# MinIO refuses every write once its drive would be more than 99% full
# ("Storage backend has reached its minimum free drive threshold"), and a
# cold build of the tests fills a few GiB of Go's build cache: a run on a
# nearly full disk fails in dozens of tests at once, far from the cause.
# Say how much is free at the start and, after a failure, at the end.
DISK_LOW_MIB=5120
check_disk() {
	local free
	free=$(disk_free_mib) || return 0
	if ((free < DISK_LOW_MIB)); then
		log "warning: only $free MiB free on the disk of $TMP (MinIO's data): MinIO refuses writes when the drive is 99% full, and a cold build needs a few GiB"
	else
		log "disk: $free MiB free on the disk of $TMP"
	fi
}

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	if ((rc != 0)); then
		log "disk at the end: $(disk_free_mib) MiB free on the disk of $TMP"
	fi
	if [[ -n $MINIO_PID ]]; then
		stop_pid "$MINIO_PID"
	fi
	if [[ -n $CONSUL_PID ]]; then
		stop_pid "$CONSUL_PID"
	fi
	rm -rf "$TMP"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Arguments: go test flags and packages. Without a package, test ./...
args=("$@")
pkgs=()
for a in "${args[@]}"; do
	case $a in
	./* | github.com/* | all) pkgs+=("$a") ;;
	esac
done
if ((${#pkgs[@]} == 0)); then
	pkgs=(./...)
	args+=(./...)
fi
# go test's default 10-minute limit per package binary is too tight for
# cmd/tabula's integration tests on a busy 2-core machine (about 5 min on
# a quiet one): give each package 40 minutes unless the caller set one.
has_timeout=0
for a in "${args[@]}"; do
	case $a in
	-timeout | -timeout=* | --timeout | --timeout=*) has_timeout=1 ;;
	esac
done
((has_timeout)) || args=(-timeout 40m "${args[@]}")

check_disk
bash deploy/install.sh minio
bash deploy/install.sh consul

# ensure_chromium: find a Chromium for the status page tests, installing
# Debian's package if there is none (about 25 s with a warm mirror; once).
ensure_chromium() {
	local c sudo=() start
	if [[ -n ${TABULA_TEST_CHROMIUM:-} ]]; then
		c=$(command -v "$TABULA_TEST_CHROMIUM") || {
			log "TABULA_TEST_CHROMIUM=$TABULA_TEST_CHROMIUM is not an executable"
			return 1
		}
		export TABULA_TEST_CHROMIUM=$c
		return 0
	fi
	for c in chromium chromium-browser; do
		if command -v "$c" >/dev/null; then
			export TABULA_TEST_CHROMIUM=$(command -v "$c")
			return 0
		fi
	done
	command -v apt-get >/dev/null || {
		log "no chromium on PATH and no apt-get to install it: install Chromium and set TABULA_TEST_CHROMIUM"
		return 1
	}
	if [[ $(id -u) != 0 ]]; then
		sudo=(sudo)
	fi
	log "installing chromium with apt-get (once)"
	start=$(date +%s.%N)
	"${sudo[@]}" apt-get update -qq
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
	c=$(command -v chromium) || {
		log "apt-get installed chromium but it is not on PATH"
		return 1
	}
	export TABULA_TEST_CHROMIUM=$c
	log "chromium installed in $(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN{printf "%.1f", e-s}')s"
}
ensure_chromium
log "Chromium: $TABULA_TEST_CHROMIUM"

# DuckDB reads the Parquet files Tabula writes in rowfile's integration
# tests, through Node: a reader Tabula did not write.
DUCKDB_NODE_API_VERSION=1.5.6-r.1
ensure_duckdb() {
	local sudo=() dir=$REPO/.cache/npm have=
	if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
		command -v apt-get >/dev/null || {
			log "no node/npm on PATH and no apt-get to install them: install Node.js and npm"
			return 1
		}
		if [[ $(id -u) != 0 ]]; then
			sudo=(sudo)
		fi
		log "installing nodejs and npm with apt-get (once)"
		"${sudo[@]}" apt-get update -qq
		"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
	fi
	if [[ -f $dir/node_modules/@duckdb/node-api/package.json ]]; then
		have=$(node -p "require('$dir/node_modules/@duckdb/node-api/package.json').version" 2>/dev/null) || have=
	fi
	if [[ $have != "$DUCKDB_NODE_API_VERSION" ]]; then
		log "installing @duckdb/node-api@$DUCKDB_NODE_API_VERSION into $dir (once)"
		mkdir -p "$dir"
		npm install --prefix "$dir" --no-audit --no-fund --loglevel=error "@duckdb/node-api@$DUCKDB_NODE_API_VERSION" >&2
	fi
	export TABULA_TEST_DUCKDB_NODE_PATH=$dir/node_modules
}
ensure_duckdb
log "DuckDB for Node: @duckdb/node-api@$DUCKDB_NODE_API_VERSION in $TABULA_TEST_DUCKDB_NODE_PATH"

# A helper binary for free ports and health checks (no curl or python needed).
go build -o "$TMP/testenv" ./deploy/testenv

random_hex() { od -An -tx1 -N"$1" /dev/urandom | tr -d ' \n'; }

# start_minio: start MinIO and wait until it is live. A port can be taken by
# another process between choosing and binding it, so try a few times.
start_minio() {
	local attempt port console start
	export MINIO_ROOT_USER=tabula-$(random_hex 6)
	export MINIO_ROOT_PASSWORD=$(random_hex 20)
	start=$(date +%s.%N)
	for attempt in 1 2 3; do
		ports=$("$TMP/testenv" free-ports 2) || return 1
		read -r port console <<<"$(echo $ports)"
		rm -rf "$TMP/minio-data" && mkdir -p "$TMP/minio-data"
		# MINIO_CI_CD relaxes checks meant for production drives; the
		# console, update checks and anonymous telemetry are off.
		MINIO_CI_CD=1 MINIO_BROWSER=off MINIO_UPDATE=off \
			"$BIN/minio" server --quiet --certs-dir "$TMP/tls/minio" \
			--address "127.0.0.1:$port" --console-address "127.0.0.1:$console" \
			"$TMP/minio-data" >"$TMP/minio.log" 2>&1 &
		MINIO_PID=$!
		if "$TMP/testenv" wait-http "https://127.0.0.1:$port/minio/health/live" "$MINIO_START_TIMEOUT" "$TMP/tls/ca.crt" 2>"$TMP/wait.err" &&
			kill -0 "$MINIO_PID" 2>/dev/null; then
			export TABULA_TEST_S3_ENDPOINT=127.0.0.1:$port
			export TABULA_TEST_S3_CA=$TMP/tls/ca.crt
			export TABULA_TEST_S3_ACCESS_KEY=$MINIO_ROOT_USER
			export TABULA_TEST_S3_SECRET_KEY=$MINIO_ROOT_PASSWORD
			log "MinIO up on $TABULA_TEST_S3_ENDPOINT after $(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN{printf "%.1f", e-s}')s (attempt $attempt)"
			return 0
		fi
		log "MinIO did not become healthy on 127.0.0.1:$port (attempt $attempt): $(cat "$TMP/wait.err")"
		tail -n 20 "$TMP/minio.log" >&2 || true
		stop_pid "$MINIO_PID"
		MINIO_PID=
	done
	log "giving up: MinIO would not start; its log is above"
	return 1
}

# consul_leader PORT: print the leader Consul's HTTP API on 127.0.0.1:PORT
# reports ("" until one is elected), over bash's /dev/tcp so no curl is
# needed. testenv wait-http is not enough: /v1/status/leader answers 200
# with an empty leader during the election, and KV writes fail until then.
consul_leader() {
	local body
	exec 3<>"/dev/tcp/127.0.0.1/$1" || return 1
	printf 'GET /v1/status/leader HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
	body=$(cat <&3)
	exec 3<&-
	printf '%s' "${body##*$'\r\n\r\n'}" | tr -d '"'
}

# start_consul: start one Consul agent in dev mode (a single server with
# in-memory state) and wait until it has a leader. Dev mode would take the
# fixed ports 8500 (HTTP), 8600 (DNS), 8502/8503 (gRPC), 8300-8302 (server
# RPC, Serf LAN and WAN), which collide between concurrent runs: HTTP and
# the ports a server must bind get free random ports, DNS and gRPC (unused
# by Tabula) are off.
start_consul() {
	local attempt http https serf_lan serf_wan server start leader i mgmt acl tls token
	start=$(date +%s.%N)
	# ACLs on, default deny; the management token is bootstrapped from the
	# configuration (and is the agent's own token), never exported.
	mgmt=$(cat /proc/sys/kernel/random/uuid)
	acl="acl { enabled = true default_policy = \"deny\" enable_token_persistence = true tokens { initial_management = \"$mgmt\" agent = \"$mgmt\" } }"
	# The HTTP API over HTTPS too (MinIO's certificate: 127.0.0.1 and
	# localhost), for the tests of the roles' --consul-ca.
	tls="tls { defaults { ca_file = \"$TMP/tls/ca.crt\" cert_file = \"$TMP/tls/minio/public.crt\" key_file = \"$TMP/tls/minio/private.key\" verify_incoming = false } }"
	for attempt in 1 2 3; do
		ports=$("$TMP/testenv" free-ports 5) || return 1
		read -r http serf_lan serf_wan server https <<<"$(echo $ports)"
		rm -rf "$TMP/consul-data" && mkdir -p "$TMP/consul-data"
		# CHECKPOINT_DISABLE: no update check over the network.
		CHECKPOINT_DISABLE=1 "$BIN/consul" agent -dev -node tabula-test \
			-bind 127.0.0.1 -client 127.0.0.1 -advertise 127.0.0.1 \
			-http-port "$http" -dns-port -1 -grpc-port -1 -grpc-tls-port -1 \
			-serf-lan-port "$serf_lan" -serf-wan-port "$serf_wan" -server-port "$server" \
			-data-dir "$TMP/consul-data" -hcl "$acl" -hcl "$tls" -hcl "ports { https = $https }" >"$TMP/consul.log" 2>&1 &
		CONSUL_PID=$!
		if "$TMP/testenv" wait-http "http://127.0.0.1:$http/v1/status/leader" "${CONSUL_START_TIMEOUT}s" 2>"$TMP/wait.err"; then
			leader=
			for ((i = 0; i < CONSUL_START_TIMEOUT * 10; i++)); do
				kill -0 "$CONSUL_PID" 2>/dev/null || break
				leader=$(consul_leader "$http" 2>/dev/null) || leader=
				[[ -n $leader ]] && break
				sleep 0.1
			done
			if [[ -n $leader ]] && kill -0 "$CONSUL_PID" 2>/dev/null &&
				token=$("$TMP/testenv" consul-acl "127.0.0.1:$http" "$mgmt" deploy/consul-policy.hcl "${CONSUL_START_TIMEOUT}s" 2>"$TMP/wait.err"); then
				export TABULA_TEST_CONSUL_ADDR=127.0.0.1:$http
				export TABULA_TEST_CONSUL_HTTPS_ADDR=127.0.0.1:$https
				export TABULA_TEST_CONSUL_CA=$TMP/tls/ca.crt
				export TABULA_TEST_CONSUL_TOKEN=$token
				export CONSUL_HTTP_TOKEN=$token
				log "Consul up on $TABULA_TEST_CONSUL_ADDR (leader $leader) after $(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN{printf "%.1f", e-s}')s (attempt $attempt)"
				return 0
			fi
			[[ -s $TMP/wait.err ]] || echo "no leader elected" >"$TMP/wait.err"
		fi
		log "Consul did not come up on 127.0.0.1:$http (attempt $attempt): $(cat "$TMP/wait.err")"
		tail -n 20 "$TMP/consul.log" >&2 || true
		stop_pid "$CONSUL_PID"
		CONSUL_PID=
	done
	log "giving up: Consul would not start; its log is above"
	return 1
}

"$TMP/testenv" certs "$TMP/tls"
start_minio
start_consul

# gofmt checks the directories of the packages tested (the whole tree for
# ./... or import paths).
gofmt_roots=()
for p in "${pkgs[@]}"; do
	case $p in
	./...) gofmt_roots=(.) && break ;;
	./*/...) gofmt_roots+=("${p%/...}") ;;
	./*) gofmt_roots+=("$p") ;; # with its subdirectories: a superset is harmless
	*) gofmt_roots=(.) && break ;;
	esac
done
log "gofmt ${gofmt_roots[*]}"
unformatted=()
while IFS= read -r f; do
	# Generated code is formatted by its generator, not by us.
	if ! grep -qE '^// Code generated .* DO NOT EDIT\.$' "$f"; then
		unformatted+=("$f")
	fi
done < <(find "${gofmt_roots[@]}" \( -path ./.cache -o -path ./.git -o -name testdata \) -prune -o -name '*.go' -type f -print0 |
	xargs -0 -r gofmt -l)
if ((${#unformatted[@]} > 0)); then
	log "files not gofmt-clean (run gofmt -w):"
	printf '  %s\n' "${unformatted[@]}" >&2
	exit 1
fi

log "go vet ${pkgs[*]}"
go vet -tags integration "${pkgs[@]}"

log "go test -tags integration -count=1 ${args[*]}"
go test -tags integration -count=1 "${args[@]}"
