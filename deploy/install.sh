#!/usr/bin/env bash
# Installs the servers Tabula's integration tests and clusters run, at
# pinned versions, into $REPO/.cache/bin (git-ignored):
#
#   deploy/install.sh [minio|consul|all]     (default: all)
#
# Both are Go programs built from source through the Go module proxy, which
# takes about three minutes each on a 2-core machine, so a build happens
# once: a stamp file .cache/bin/.stamp-NAME records the version built, and
# a binary whose stamp (or embedded module version) matches is reused.
# Change a version below to rebuild.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=$REPO/.cache/bin

MINIO_MODULE=github.com/minio/minio
MINIO_VERSION=v0.0.0-20260212201848-7aac2a2c5b7c
CONSUL_MODULE=github.com/hashicorp/consul
CONSUL_VERSION=v1.20.6

log() { echo "install: $*" >&2; }

# installed NAME MODULE VERSION: whether $BIN/NAME is that version. A binary
# without a stamp (built by hand with the same command) is recognised by the
# module version Go embeds in it, and stamped.
installed() {
	local name=$1 module=$2 version=$3 bin=$BIN/$1 stamp=$BIN/.stamp-$1
	[[ -x $bin ]] || return 1
	if [[ -f $stamp && $(<"$stamp") == "$module@$version" ]]; then
		return 0
	fi
	if go version -m "$bin" 2>/dev/null | grep -Eq "^[[:space:]]+(mod|dep)[[:space:]]+$module[[:space:]]+$version([[:space:]]|\$)"; then
		echo "$module@$version" >"$stamp"
		return 0
	fi
	return 1
}

install_minio() {
	if installed minio "$MINIO_MODULE" "$MINIO_VERSION"; then
		return
	fi
	log "building MinIO $MINIO_VERSION (takes a few minutes, once)"
	local tmp
	tmp=$(mktemp -d "$BIN/.build-minio.XXXXXX")
	# Build outside the repository so Tabula's go.mod plays no part.
	(cd "$tmp" && GOBIN=$tmp GOFLAGS=-buildvcs=false go install "$MINIO_MODULE@$MINIO_VERSION")
	mv -f "$tmp/minio" "$BIN/minio"
	rm -rf "$tmp"
	echo "$MINIO_MODULE@$MINIO_VERSION" >"$BIN/.stamp-minio"
	log "MinIO installed in $BIN/minio"
}

install_consul() {
	if installed consul "$CONSUL_MODULE" "$CONSUL_VERSION"; then
		return
	fi
	log "building Consul $CONSUL_VERSION (takes a few minutes, once)"
	local tmp
	tmp=$(mktemp -d "$BIN/.build-consul.XXXXXX")
	# Consul's go.mod has replace directives, which "go install module@version"
	# refuses; a wrapper module that requires Consul builds it instead. One of
	# its dependencies is missing from the checksum database.
	(
		cd "$tmp"
		export GONOSUMDB=github.com/hashicorp/consul-awsauth GOFLAGS="-mod=mod -buildvcs=false"
		go mod init tabula.local/consul-build >/dev/null 2>&1
		go get "$CONSUL_MODULE@$CONSUL_VERSION"
		go build -o "$tmp/consul" "$CONSUL_MODULE"
	)
	mv -f "$tmp/consul" "$BIN/consul"
	rm -rf "$tmp"
	echo "$CONSUL_MODULE@$CONSUL_VERSION" >"$BIN/.stamp-consul"
	log "Consul installed in $BIN/consul"
}

main() {
	local what=${1:-all}
	case $what in
	minio | consul | all) ;;
	*)
		echo "usage: $0 [minio|consul|all]" >&2
		exit 2
		;;
	esac
	command -v go >/dev/null || {
		echo "install: go is not on PATH" >&2
		exit 1
	}
	mkdir -p "$BIN"
	# Concurrent runs (two test scripts at once) wait for one build rather
	# than both building.
	if command -v flock >/dev/null; then
		exec 9>"$BIN/.install.lock"
		flock 9
	fi
	case $what in
	minio) install_minio ;;
	consul) install_consul ;;
	all)
		install_minio
		install_consul
		;;
	esac
}

main "$@"
