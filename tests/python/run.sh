#!/usr/bin/env bash
# The Python tests (pytest), against the daemon KVPOOLD (default build/bin/kvpoold):
#   run.sh binding   the binding's (tests/python)
#   run.sh engine    kvpool.engine's (tests/python/engine), which need torch
#   run.sh exporter  kvctl exporter's (tests/exporter), which need Debian's prometheus
#                    (the server and promtool) and KVCTL
# Exits 77 (skipped) when the interpreter lacks pytest, numpy or (for the engine) torch, or
# the binding is not built (the exporter's tests drive their workload through it), or
# prometheus is missing.
set -u
cd "$(dirname "$0")/../.." || exit 1
suite=${1:-binding}
shift
py=${PYTHON:-$(test -x /usr/bin/python3 && echo /usr/bin/python3 || command -v python3)}
if ! "$py" -c 'import pytest, numpy' 2>/dev/null; then
	echo "skipped: $py lacks pytest or numpy (apt-get install python3-pytest python3-numpy)"
	exit 77
fi
if [ ! -e lib/python/kvpool/_kvpool.abi3.so ]; then
	echo "skipped: the binding is not built (no Python.h: apt-get install python3-dev)"
	exit 77
fi
case $suite in
binding)
	exec "$py" -m pytest -q -p no:cacheprovider tests/python --ignore=tests/python/engine "$@" ;;
engine)
	if ! "$py" -c 'import torch' 2>/dev/null; then
		echo "skipped: $py lacks torch (apt-get install python3-torch)"
		exit 77
	fi
	exec "$py" -m pytest -q -p no:cacheprovider tests/python/engine "$@" ;;
exporter)
	for tool in prometheus promtool; do
		command -v $tool >/dev/null ||
			{ echo "skipped: $tool is not installed (apt-get install prometheus)"; exit 77; }
	done
	exec "$py" -m pytest -q -p no:cacheprovider tests/exporter "$@" ;;
*)
	echo "run.sh: unknown suite '$suite' (binding, engine or exporter)" >&2
	exit 2 ;;
esac
