#!/usr/bin/env bash
# The Python binding's tests (pytest), against the daemon KVPOOLD (default daemon/kvpoold).
# Exits 77 (skipped) when the interpreter lacks pytest or numpy, or the binding is not built.
set -u
cd "$(dirname "$0")/../.." || exit 1
py=${PYTHON:-$(test -x /usr/bin/python3 && echo /usr/bin/python3 || command -v python3)}
if ! "$py" -c 'import pytest, numpy' 2>/dev/null; then
	echo "skipped: $py lacks pytest or numpy (apt-get install python3-pytest python3-numpy)"
	exit 77
fi
if [ ! -e lib/python/kvpool/_kvpool.abi3.so ]; then
	echo "skipped: the binding is not built (no Python.h: apt-get install python3-dev)"
	exit 77
fi
exec "$py" -m pytest -q -p no:cacheprovider tests/python "$@"
