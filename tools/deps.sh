#!/usr/bin/env bash
# Installs the Debian packages kvpool builds and tests with, when any is
# missing: as root directly, otherwise through sudo. Prints what it installs.
set -eu
packages=(
	build-essential make pkg-config clang
	libxxhash-dev libcmocka-dev liburing-dev libinih-dev libjson-c-dev systemtap-sdt-dev
	libbpf-dev libelf-dev zlib1g-dev llvm bpftool bpftrace jq prometheus
	# libFuzzer and the sanitizers' runtimes: only a Recommends of clang
	libclang-rt-14-dev
	# the Python binding: headers to build it, DLPack's header, and what its tests import
	python3-dev libdlpack-dev python3-numpy python3-pytest
)
missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

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
