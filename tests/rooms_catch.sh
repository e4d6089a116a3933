#!/usr/bin/env bash
# tests/rooms.sh must catch what it is for: the real dependency files of three objects, two of
# the daemon and one of a tool, each given a header its room may not include, make it fail naming
# all three, and the same files unchanged pass.
# Runs after a build (make test builds first).
set -u
cd "$(dirname "$0")/.." || exit 1

fail() { echo "rooms_catch: $*"; exit 1; }
for d in build/daemon/pools/pool_layout.d build/daemon/tenants/charge.d build/tools/kvbench/replay.d; do
	[ -f "$d" ] || { echo "rooms_catch: skipped: no $d (build first)"; exit 77; }
done
tmp=$(mktemp -d build/rooms-catch.XXXXXX) || fail "mktemp"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/daemon/pools" "$tmp/daemon/tenants" "$tmp/tools/kvbench"
# A fresh copy: newer than every source it names, as a dependency file just written.
cp build/daemon/pools/pool_layout.d "$tmp/daemon/pools/"
cp build/daemon/tenants/charge.d "$tmp/daemon/tenants/"
cp build/tools/kvbench/replay.d "$tmp/tools/kvbench/"

out=$(tests/rooms.sh "$tmp" 2>&1) || fail "the unchanged dependency files fail: $out"
grep -qx "rooms: 3 objects checked in $tmp (2 daemon, 0 gpu, 1 tools): no upward include" <<<"$out" ||
	fail "unexpected pass line: $out"

# Spelled as a bare include through ../ would be: the compiler's file names the header itself.
sed -i '1s|\.c |.c daemon/pools/../session/session.h |' "$tmp/daemon/pools/pool_layout.d"
sed -i '1s|\.c |.c daemon/serve.h |' "$tmp/daemon/tenants/charge.d"
sed -i '1s|\.c |.c tools/kvbench/../kvctl/kvctl.h |' "$tmp/tools/kvbench/replay.d"
out=$(tests/rooms.sh "$tmp" 2>&1) && fail "upward includes passed: $out"
expected="rooms: daemon/pools/pool_layout.c includes daemon/session/session.h: pools is below session
rooms: daemon/tenants/charge.c includes daemon/serve.h: a header of the top, not shared (daemon/ROOMS)
rooms: tools/kvbench/replay.c includes tools/kvctl/kvctl.h: kvbench may include only its own folder and the shared rooms (tools/ROOMS)
rooms: 3 violations in 3 objects checked in $tmp (2 daemon, 0 gpu, 1 tools)"
[ "$out" = "$expected" ] || fail "expected:
$expected
got:
$out"
echo "rooms_catch: an upward include, a top header and a tool's include of another's fail the check; unchanged, it passes"
