#!/usr/bin/env bash
# Every program's --version is exactly "NAME VERSION" (VERSION the file's); kvctl version
# prints kvctl's, libkvpool's and the daemon's lines, or says the daemon is not running.
set -u
cd "$(dirname "$0")/.." || exit 1
bin=${BIN:-build/bin}
daemon=${KVPOOLD:-$bin/kvpoold}
version=$(cat VERSION)
fail() { echo "FAIL: $*"; exit 1; }

for prog in "$daemon" "$bin/kvctl" "$bin/kvtrace" "$bin/kvbench" "$bin/kvengine"; do
	for flag in --version -V; do
		out=$("$prog" $flag) || fail "$prog $flag: exit $?"
		[ "$out" = "${prog##*/} $version" ] || fail "$prog $flag said '$out'"
	done
done

dir=$(mktemp -d)
trap 'kill $pid 2>/dev/null; rm -rf "$dir"' EXIT
pid=
out=$("$bin/kvctl" --socket "$dir/sock" version)
[ $? = 1 ] || fail "kvctl version without a daemon: exit status not 1"
want="kvctl $version
libkvpool $version abi 2
kvpoold: not running at $dir/sock"
[ "$out" = "$want" ] || fail "kvctl version without a daemon said '$out'"

"$daemon" --socket "$dir/sock" 2>"$dir/log" &
pid=$!
for _ in $(seq 100); do [ -S "$dir/sock" ] && break; sleep 0.05; done
# The spin wake-up, the stats page, mapping and monitor (kvctl's); the admin feature (0x2) for root.
out=$(KVPOOL_SOCKET=$dir/sock "$bin/kvctl" version) || fail "kvctl version: exit $?"
want="kvctl $version
libkvpool $version abi 2
kvpoold $version abi 2 features $([ "$(id -u)" = 0 ] && echo 0x3f || echo 0x3d)"
[ "$out" = "$want" ] || fail "kvctl version said '$out'"
"$bin/kvctl" --socket "$dir/sock" version extra 2>/dev/null
[ $? = 2 ] || fail "kvctl version extra: exit status not 2"

if [ -e lib/python/kvpool/_kvpool.abi3.so ]; then
	py=$(test -x /usr/bin/python3 && echo /usr/bin/python3 || command -v python3)
	out=$(PYTHONPATH=lib/python "$py" -c 'import kvpool; print(kvpool.__version__)')
	[ "$out" = "$version" ] || fail "kvpool.__version__ is '$out'"
fi
echo "ok: every --version says $version; kvctl version with and without a daemon"
