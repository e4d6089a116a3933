#!/usr/bin/env bash
# kvctl's command line, output and errors, exactly (and kvengine's connect errors):
#  - options before or after the command (-s, --socket, --socket=, $KVPOOL_SOCKET);
#  - each command's --help is its own usage, exit 0; kvctl --help lists every command;
#  - usage errors: "kvctl: CMD: unknown option '--x'", "Try 'kvctl CMD --help' ...", exit 2;
#  - pool create / destroy: one line each; refusals print the daemon's reason, exit 1;
#  - kvctl is a monitor: never listed, counted ("monitors: 1"), its connections not logged
#    at the daemon's default level (info);
#  - errors name the socket, the pool, the namespace: no daemon, no pool, a namespace or
#    the socket refused to another uid (root only: run as uid 65534 with setpriv).
# Usage: kvctl_cli.sh ($BIN, default build/bin, for kvpoold, kvctl and kvengine; $KVPOOLD for
# another kvpoold).
set -u
cd "$(dirname "$0")/.." || exit 1
bin=${BIN:-build/bin}
daemon=${KVPOOLD:-$bin/kvpoold}
failures=0
fail() {
	echo "FAIL: $*"
	failures=$((failures + 1))
}

dir=$(mktemp -d)
trap 'kill $pid $engine 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"' EXIT
pid= engine=
sock=$dir/kvpool.sock
kvctl=$bin/kvctl kvengine=$bin/kvengine

# expect STATUS WANT CMD...: CMD's exit status is STATUS and its stdout and stderr together WANT.
expect() {
	local status=$1 want=$2 out rc
	shift 2
	out=$("$@" 2>&1)
	rc=$?
	[ "$rc" = "$status" ] || fail "$*: exit $rc, expected $status; said: $out"
	[ "$out" = "$want" ] || fail "$*: said"$'\n'"$out"$'\n'"expected"$'\n'"$want"
}
# first_line CMD...: exit 0 and the first line of its stdout.
first_line() {
	local out
	out=$("$@") || fail "$*: exit $?"
	head -n 1 <<<"$out"
}

# No daemon: the socket named, and how to start one.
expect 1 "kvctl: no kvpoold at $sock (is it running? kvpoold -s $sock)" "$kvctl" stats -s "$sock"
expect 1 "kvengine: no kvpoold at $sock (is it running? kvpoold -s $sock)" \
	"$kvengine" -s "$sock" --pool p

"$daemon" --socket "$sock" --config <(printf '[namespace.x]\nuids = 1000\n') 2>"$dir/log" &
pid=$!
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done
[ -S "$sock" ] || { echo "FAIL: kvpoold did not start"; cat "$dir/log"; exit 1; }

# Options before or after the command, and every way of naming the socket.
expect 0 "pool p created: 64 blocks of 4 tokens, groups full swa:8, KV none" \
	"$kvctl" pool create p blocks=64 block_size=4 "groups=full swa:8" --socket "$sock"
expect 0 "pool kv created: 256 blocks of 16 tokens, groups full swa:64 chunked:32, KV 4.0 MiB" \
	"$kvctl" -s "$sock" pool create kv blocks=256 block_size=16 groups=full,swa:64,chunked:32 \
	kv_heads=2 head_dim=64 layers_per_group=2 dtype=f16
expect 0 "pool tiny created: 2 blocks of 1 tokens, groups full, KV 128 B" \
	"$kvctl" pool --socket="$sock" create tiny blocks=2 block_size=1 groups=full kv_heads=1 \
	head_dim=16 layers_per_group=1 dtype=f16
expect 0 "pool small created: 2 blocks of 1 tokens, groups full, KV 1.0 KiB" \
	"$kvctl" pool create small blocks=2 block_size=1 groups=full kv_heads=1 head_dim=64 \
	layers_per_group=1 -s"$sock"
for args in "stats -s $sock" "-s $sock stats" "stats --json -s $sock" "stats -s $sock --prometheus" \
	"clients --socket $sock" "top --count 1 --json -s $sock" "version -s $sock"; do
	# shellcheck disable=SC2086 # the words of $args are the arguments
	"$kvctl" $args >/dev/null || fail "kvctl $args: exit $?"
done
KVPOOL_SOCKET=$sock "$kvctl" stats >/dev/null || fail "KVPOOL_SOCKET=... kvctl stats: exit $?"
# A command's options before it too: "kvctl --json stats" is "kvctl stats --json".
for args in "--json stats" "--prometheus stats" "--json clients" "--count 1 --json top" \
	"--interval 100 --count 1 --json top" "--interval=100 --count=1 --json top"; do
	# shellcheck disable=SC2086
	before=$(first_line "$kvctl" -s "$sock" $args | cut -c1-6)
	# shellcheck disable=SC2086
	set -- $args
	after=$(first_line "$kvctl" -s "$sock" "${@: -1}" "${@:1:$#-1}" | cut -c1-6)
	[ -n "$before" ] && [ "$before" = "$after" ] || fail "kvctl $args: '$before', not '$after'"
done
set --
[ "$(first_line "$kvctl" --json -s "$sock" stats | cut -c1)" = "{" ] || fail "kvctl --json -s S stats: not JSON"
[ "$(first_line "$kvctl" -s "$sock" --prometheus stats | cut -c1-7)" = "# HELP " ] ||
	fail "kvctl -s S --prometheus stats: not Prometheus"

# pool create / destroy: one line each way; a refusal gives the daemon's reason.
expect 1 "kvctl: pool create p: a pool named p exists" \
	"$kvctl" pool create p blocks=64 block_size=4 groups=full -s "$sock"
expect 1 "kvctl: pool create k: kv_heads = 2000: out of range (1..1024)" \
	"$kvctl" pool create k blocks=16 block_size=4 groups=full kv_heads=2000 head_dim=8 \
	layers_per_group=1 -s "$sock"
expect 0 "pool tiny destroyed" "$kvctl" pool destroy tiny -s "$sock"
expect 1 "kvctl: pool destroy tiny: no pool 'tiny' on $sock" "$kvctl" pool destroy tiny -s "$sock"
"$kvengine" -s "$sock" --pool p --system 5 --question 4 --decode 2 --hold-ms 2000 >"$dir/engine" &
engine=$!
for _ in $(seq 200); do grep -q decoded "$dir/engine" && break; sleep 0.02; done
expect 1 "kvctl: pool destroy p: in use: clients attached 1, sequences open 1" \
	"$kvctl" pool destroy p -s "$sock"

# kvctl is a monitor: the engine is the only client listed; kvctl is counted.
out=$("$kvctl" stats -s "$sock")
grep -qx "clients: 1 connected, 0 disconnected, 0 killed with sequences open; monitors: 1" <<<"$out" ||
	fail "kvctl stats: no totals line with monitors: 1"$'\n'"$out"
grep -qx "CACHED: blocks holding a prefix-cache entry, counted in FREE (evictable) or USED; not a third part" \
	<<<"$out" || fail "kvctl stats: no CACHED note"
grep -qE "^OPERATION +COUNT +ERRORS +p50<= +p99<=$" <<<"$out" || fail "kvctl stats: no p50<= p99<= header"
grep -qx "p50<=, p99<=: upper bounds of the power-of-two latency buckets holding them" <<<"$out" ||
	fail "kvctl stats: no note on p50<= and p99<="
# The engine holds 11 tokens: full, 3 blocks (12 slots); swa:8, the 2 its window still reads.
grep -qx "  0     full           0         3            0            12            11   8.3%" <<<"$out" ||
	fail "kvctl stats: full group's fragmentation"$'\n'"$out"
grep -qx "  1     swa            8         2            1             8             7  12.5%" <<<"$out" ||
	fail "kvctl stats: swa group's fragmentation"$'\n'"$out"
out=$("$kvctl" clients -s "$sock")
[ "$(grep -cE '^[0-9]+ +[0-9]+ +[0-9]+ ' <<<"$out")" = 1 ] || fail "kvctl clients: not one row"$'\n'"$out"
grep -qx "monitors: 1 (connections that only watch, kvctl among them: not listed)" <<<"$out" ||
	fail "kvctl clients: no monitors line"$'\n'"$out"
wait $engine || fail "the engine failed"
engine=
# Its sequence gone: no fragmentation left, at once.
out=$("$kvctl" stats -s "$sock")
grep -qx "  0     full           0         0            0             0             0   0.0%" <<<"$out" ||
	fail "kvctl stats: full group's fragmentation after the engine"$'\n'"$out"
expect 0 "pool p destroyed" "$kvctl" pool destroy p -s "$sock"

# Each command's help, and usage errors naming the command.
for cmd in stats clients top acct version pool "pool create" "pool destroy"; do
	# shellcheck disable=SC2086
	line=$(first_line "$kvctl" $cmd --help)
	case $line in
	"Usage: kvctl [--socket PATH] $cmd "* | "Usage: kvctl $cmd "* | "Usage: kvctl $cmd") ;;
	*) fail "kvctl $cmd --help begins '$line'" ;;
	esac
done
[ "$(first_line "$kvctl" pool -h)" = "Usage: kvctl pool create NAME KEY=VALUE... [--socket PATH]" ] ||
	fail "kvctl pool -h"
"$kvctl" stats --help | grep -q -- "--prometheus" || fail "kvctl stats --help: no --prometheus"
"$kvctl" pool create --help | grep -qx "  pool NAME created: N blocks of BS tokens, groups G, KV SIZE" ||
	fail "kvctl pool create --help: no output line"
help=$("$kvctl" --help)
for cmd in "stats \[" "clients \[" "top \[" "acct \[" "pool create NAME" "pool destroy NAME" "version "; do
	grep -qE "^  $cmd" <<<"$help" || fail "kvctl --help does not list '$cmd'"
done
expect 2 "kvctl: stats: unknown option '--x'
Try 'kvctl stats --help' for more information." "$kvctl" stats --x -s "$sock"
expect 2 "kvctl: pool create: unknown option '--x'
Try 'kvctl pool create --help' for more information." "$kvctl" pool create q blocks=2 --x
expect 2 "kvctl: clients: unknown option '--prometheus'
Try 'kvctl clients --help' for more information." "$kvctl" clients --prometheus
expect 2 "kvctl: top: option '--interval' needs a value
Try 'kvctl top --help' for more information." "$kvctl" top --interval
expect 2 "kvctl: version: unexpected argument 'extra'
Try 'kvctl version --help' for more information." "$kvctl" version extra
expect 2 "kvctl: unknown command 'frob'
Try 'kvctl --help' for more information." "$kvctl" frob
# Before the command, an option it does not take is still its usage error.
expect 2 "kvctl: clients: unknown option '--prometheus'
Try 'kvctl clients --help' for more information." "$kvctl" --prometheus clients
expect 2 "kvctl: version: unknown option '--json'
Try 'kvctl version --help' for more information." "$kvctl" --json version
expect 2 "kvctl: stats: unknown option '--x'
Try 'kvctl stats --help' for more information." "$kvctl" --x stats -s "$sock"
expect 2 "kvctl: pool create: unknown option '--json'
Try 'kvctl pool create --help' for more information." "$kvctl" --json pool create q blocks=2
expect 2 "kvctl: stats: unknown option '--pid'
Try 'kvctl stats --help' for more information." "$kvctl" --pid 1 stats
expect 2 "kvctl: top: bad value for --interval: '0' (milliseconds, at least 1)
Try 'kvctl top --help' for more information." "$kvctl" --interval 0 top
expect 2 "kvctl: option '--interval' needs a value
Try 'kvctl --help' for more information." "$kvctl" --interval
expect 2 "kvctl: unknown option '--x'
Try 'kvctl --help' for more information." "$kvctl" --x
expect 2 "kvctl: no command
Try 'kvctl --help' for more information." "$kvctl" --json
# A bad pool setting names what the key takes, or the keys.
expect 2 "kvctl: pool create: blocks=1: blocks is 2..16777216
Try 'kvctl pool create --help' for more information." "$kvctl" pool create q blocks=1
expect 2 "kvctl: pool create: blocks=abc: blocks is 2..16777216
Try 'kvctl pool create --help' for more information." "$kvctl" pool create q blocks=abc
groups="1..16 of full, swa:W (W 2..1073741824), rswa:W, cyclic:W (W 1..1073741824), chunked:C (C 1..1073741824)"
expect 2 "kvctl: pool create: groups=swa:1: groups is $groups
Try 'kvctl pool create --help' for more information." "$kvctl" pool create q groups=swa:1
expect 2 "kvctl: pool create: groups=$(printf 'full,%.0s' {1..16})full: groups is $groups
Try 'kvctl pool create --help' for more information." \
	"$kvctl" pool create q "groups=$(printf 'full,%.0s' {1..16})full"
expect 2 "kvctl: pool create: caching=yes: caching is on|off
Try 'kvctl pool create --help' for more information." "$kvctl" pool create q caching=yes
expect 2 "kvctl: pool create: blocks=, block_size= and groups= are required
Try 'kvctl pool create --help' for more information." "$kvctl" pool create q bogus=1
expect 2 "kvctl: pool create: bad pool setting '=1': not KEY=VALUE
Try 'kvctl pool create --help' for more information." "$kvctl" pool create q =1
# Keys kvctl does not know go to the daemon as they are (POOL_CREATE v3): it names them.
if [ "$(id -u)" = 0 ]; then
	expect 1 "kvctl: pool create q: bogus: unknown pool key" \
		"$kvctl" -s "$sock" pool create q blocks=16 block_size=4 groups=full bogus=1
	expect 1 "kvctl: pool create q: blocks set twice" \
		"$kvctl" -s "$sock" pool create q blocks=16 block_size=4 groups=full blocks=8
fi

# Refusals that name what could not be had.
expect 1 "kvengine: pool 'nope' not found on $sock (kvctl pool create ...)" \
	"$kvengine" -s "$sock" --pool nope
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
	cp "$kvctl" "$kvengine" "$dir/" && chmod 755 "$dir"
	as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
	group=$(stat -c %G "$sock")
	expect 1 "kvctl: $sock: permission denied (the socket is mode 0660, group $group)" \
		as_nobody "$dir/kvctl" stats -s "$sock"
	chmod 666 "$sock"
	expect 1 "kvengine: namespace 'x' refused on $sock: uid 65534 is not granted it (config [namespace.x] uids)" \
		as_nobody "$dir/kvengine" -s "$sock" --pool kv --namespace x
	expect 1 "kvctl: $sock: admin refused to uid 65534 (admin needs root or the daemon's uid 0)" \
		as_nobody "$dir/kvctl" pool destroy kv -s "$sock"
else
	echo "not root (or no setpriv): the refusals to another uid are not checked"
fi

# Only the engine's connection is logged at info: kvctl's went at debug.
kill -TERM $pid
wait $pid || fail "kvpoold did not exit 0"
pid=
[ "$(grep -c ' connected: pid ' "$dir/log")" = 1 ] && [ "$(grep -cE ' (disconnected|killed): pid ' "$dir/log")" = 1 ] ||
	fail "the log has kvctl's connections:"$'\n'"$(cat "$dir/log")"

[ "$failures" = 0 ] || exit 1
echo "ok: kvctl's options, help, output lines and errors; kvctl a monitor"
