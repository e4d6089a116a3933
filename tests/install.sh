#!/usr/bin/env bash
# `make install` into a scratch prefix, then: an engine built against the installed
# libkvpool through pkg-config alone, linked to libkvpool.so.0 and statically; the .so
# exports kvp_* only; the installed Python package imports from outside the tree.
set -eu
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
make --no-print-directory -s install PREFIX="$dir" SYSCONFDIR="$dir/etc" >/dev/null
cat >"$dir/engine.c" <<'C'
#include <libkvpool.h>
#include <stdio.h>
int main(void)
{
	struct kvp_connect_opts o = { .socket_path = "/nonexistent/kvpool.sock" };
	struct kvp_client *c;
	/* No daemon there: the call must fail cleanly with -ENOENT. */
	return kvp_connect(&o, &c) == -2 ? 0 : 1;
}
C
export PKG_CONFIG_PATH=$dir/lib/pkgconfig
# shellcheck disable=SC2046
cc -std=gnu11 -Wall -Wextra -Werror "$dir/engine.c" $(pkg-config --cflags --libs libkvpool) -o "$dir/engine"
readelf -d "$dir/engine" | grep -q 'NEEDED.*\[libkvpool.so.0\]' || { echo "engine: not linked to libkvpool.so.0"; exit 1; }
LD_LIBRARY_PATH=$dir/lib "$dir/engine"
# shellcheck disable=SC2046
cc -std=gnu11 -Wall -Wextra -Werror -static-libgcc "$dir/engine.c" -o "$dir/engine-static" \
	$(pkg-config --cflags libkvpool) "$dir/lib/libkvpool.a" $(pkg-config --static --libs-only-l libkvpool | sed 's/-lkvpool//')
"$dir/engine-static"

readelf -d "$dir/lib/libkvpool.so.0" | grep -q 'SONAME.*\[libkvpool.so.0\]' || { echo "libkvpool.so.0: no SONAME"; exit 1; }
others=$(nm -D --defined-only "$dir/lib/libkvpool.so.0" | awk '$2 ~ /[TDBR]/ && $3 !~ /^kvp_/ {print $3}')
[ -z "$others" ] || { echo "libkvpool.so.0 exports more than kvp_*: $others"; exit 1; }

py=$(test -x /usr/bin/python3 && echo /usr/bin/python3 || command -v python3)
if [ -e lib/python/kvpool/_kvpool.abi3.so ]; then
	site=$(echo "$dir"/lib/python3*/dist-packages)
	(cd / && PYTHONPATH=$site "$py" -c 'import kvpool, sys; assert kvpool.__file__.startswith(sys.argv[1]), kvpool.__file__' "$site")
	# The vLLM connector's package comes too: pool-config needs no vLLM.
	(cd / && PYTHONPATH=$site "$py" -m kvpool.vllm pool-config --help | grep -q '^usage: python3 -m kvpool.vllm pool-config') ||
		{ echo "python3 -m kvpool.vllm: not installed"; exit 1; }
	# The engine comes with the package (where torch is).
	if "$py" -c 'import torch' 2>/dev/null; then
		(cd / && PYTHONPATH=$site "$py" -m kvpool.engine --help | grep -q '^usage: python3 -m kvpool.engine') ||
			{ echo "python3 -m kvpool.engine: not installed"; exit 1; }
	fi
fi
