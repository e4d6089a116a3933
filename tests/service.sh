#!/usr/bin/env bash
# kvpool as a service, installed: `make install DESTDIR=ROOT`; systemd-analyze
# verify accepts the installed units; the installed daemon, started as
# kvpoold.service starts it (its ExecStart, the socket passed by
# systemd-socket-activate's LISTEN_FDS, stderr a journal stream), serves the
# installed kvctl, kvengine and Python package; its log lines carry syslog
# priorities; SIGHUP reloads the config; a second install keeps the config;
# `make uninstall` leaves only the config. CI has no systemd as PID 1: this is
# the closest it gets.
set -eu
for t in systemd-socket-activate systemd-analyze man; do
	command -v $t >/dev/null || { echo "$t not installed (tools/deps.sh --tests)"; exit 77; }
done
root=$(mktemp -d)
pid=
cleanup() {
	[ -z "$pid" ] || kill "$pid" 2>/dev/null || true
	wait
	rm -rf "$root"
}
trap cleanup EXIT
log=$root/kvpoold.log
fail() {
	echo "service: $*"
	[ ! -s "$log" ] || sed 's/^/    log: /' "$log"
	exit 1
}
# Waits up to 5 s for the daemon's log to have a line matching $1 (grep -E).
await_log() {
	for _ in $(seq 100); do
		grep -qE -- "$1" "$log" && return 0
		sleep 0.05
	done
	fail "no log line matching: $1"
}

make --no-print-directory -s install DESTDIR="$root" >/dev/null
usr=$root/usr/local
units=$usr/lib/systemd/system
conf=$root/etc/kvpool/kvpool.conf
[ -f "$conf" ] || fail "make install wrote no $conf"

# --root resolves what the units name inside ROOT: systemd's own units and
# /bin/kill (ExecReload) are copied in; man finds the installed pages.
mkdir -p "$root/lib/systemd" "$root/bin"
cp -r /lib/systemd/system "$root/lib/systemd/"
cp /bin/kill "$root/bin/"
out=$(MANPATH=$usr/share/man systemd-analyze verify --root="$root" \
	"$units/kvpoold.service" "$units/kvpoold.socket" "$units/kvpool-exporter.service" 2>&1) ||
	fail "systemd-analyze verify: $out"
[ -z "$out" ] || fail "systemd-analyze verify warns: $out"
# The cluster tier's drop-in (share/kvpool/tier-remote.conf), installed as its comment says:
# the unit still verifies, and takes its lines.
mkdir -p "$units/kvpoold.service.d"
cp "$usr/share/kvpool/tier-remote.conf" "$units/kvpoold.service.d/" ||
	fail "make install did not install share/kvpool/tier-remote.conf"
echo "NoSuchKey=1" >"$units/kvpoold.service.d/zz-canary.conf"
out=$(systemd-analyze verify --root="$root" "$units/kvpoold.service" 2>&1) || true
grep -q "zz-canary.conf" <<<"$out" || fail "systemd-analyze does not read kvpoold.service.d: $out"
rm "$units/kvpoold.service.d/zz-canary.conf"
out=$(MANPATH=$usr/share/man systemd-analyze verify --root="$root" "$units/kvpoold.service" 2>&1) ||
	fail "systemd-analyze verify with tier-remote.conf: $out"
[ -z "$out" ] || fail "systemd-analyze verify with tier-remote.conf warns: $out"
rm -r "$units/kvpoold.service.d"
grep -qx 'ListenSequentialPacket=/run/kvpool/kvpool.sock' "$units/kvpoold.socket" ||
	fail "kvpoold.socket does not listen on /run/kvpool/kvpool.sock"
exec_start=$(sed -n 's/^ExecStart=//p' "$units/kvpoold.service")
[ "$exec_start" = "/usr/local/sbin/kvpoold --config /etc/kvpool/kvpool.conf" ] ||
	fail "ExecStart=$exec_start"
exec_start=$(sed -n 's/^ExecStart=//p' "$units/kvpool-exporter.service")
[ "$exec_start" = '/usr/local/bin/kvctl --socket /run/kvpool/kvpool.sock exporter --listen ${KVPOOL_EXPORTER_LISTEN}' ] ||
	fail "kvpool-exporter.service: ExecStart=$exec_start"
grep -qx 'RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6' "$units/kvpool-exporter.service" ||
	fail "kvpool-exporter.service does not allow AF_INET"
grep -qx "      path: /usr/local/share/kvpool/grafana" "$usr/share/kvpool/grafana/provisioning.yaml" ||
	fail "the Grafana provider does not point at the installed dashboard"
cmp -s tools/grafana/kvpool.json "$usr/share/kvpool/grafana/kvpool.json" ||
	fail "make install did not install tools/grafana/kvpool.json"
for page in $(find "$usr/share/man" -type f); do
	man -l "$page" >/dev/null 2>"$root/man.err" && [ ! -s "$root/man.err" ] ||
		fail "man -l $page: $(cat "$root/man.err")"
done

# The unit's command line under ROOT, started at the first connection.
sock=$root/run/kvpool/kvpool.sock
mkdir -p "$root/run/kvpool"
: >"$log"
systemd-socket-activate --seqpacket -l "$sock" -E JOURNAL_STREAM="$(stat -c %d:%i "$log")" \
	"$usr/sbin/kvpoold" --config "$conf" 2>>"$log" &
pid=$!
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done

out=$("$usr/bin/kvctl" version -s "$sock") || fail "kvctl version: $out"
version=$(cat VERSION)
expect="kvctl $version
libkvpool $version abi 2
kvpoold $version abi 2 features 0x"
[ "${out%features 0x*}features 0x" = "$expect" ] || fail "kvctl version printed: $out"
await_log "^<5>listening on $sock \(from systemd\)"
[ ! -e "$sock.lock" ] || fail "a daemon given its socket by systemd made $sock.lock"
"$usr/bin/kvctl" stats -s "$sock" | grep -qE '^default +16 +512 ' || fail "kvctl stats: no pool default"
# The installed exporter, as its unit runs it (on a port of its own here).
"$usr/bin/kvctl" --socket "$sock" exporter --listen 127.0.0.1:0 2>"$root/exporter.log" &
xpid=$!
for _ in $(seq 100); do grep -q '^kvctl exporter: serving' "$root/exporter.log" && break; sleep 0.05; done
addr=$(sed -n 's|^kvctl exporter: serving http://\([^/]*\)/metrics.*|\1|p' "$root/exporter.log")
metrics=$(curl -sf "http://$addr/metrics") || fail "exporter: no /metrics at $addr: $(cat "$root/exporter.log")"
grep -qx 'kvpool_up 1' <<<"$metrics" || fail "exporter: kvpool_up is not 1"
grep -qx 'kvpool_pool_capacity_blocks{pool="default"} 512' <<<"$metrics" ||
	fail "exporter: no pool default in /metrics"
[ "$(curl -s "http://$addr/healthz")" = ok ] || fail "exporter: /healthz is not ok"
kill "$xpid"
wait "$xpid" || fail "kvctl exporter exited $? after SIGTERM"

out=$("$usr/bin/kvengine" -s "$sock" --decode 4 --seed 1) || fail "kvengine: $out"
epid=$(grep -oE 'client [0-9]+ connected: pid [0-9]+ uid [0-9]+ pool .default.' "$log" | tail -n 1)
[ -n "$epid" ] || fail "no connect line for kvengine"
await_log "^<6>client [0-9]+ disconnected: pid [0-9]+ uid [0-9]+ pool .default. namespace .*: hung up; 0 sequences closed"

site=$(echo "$usr"/lib/python3*/dist-packages)
py=$(test -x /usr/bin/python3 && echo /usr/bin/python3 || command -v python3)
if [ -d "$site/kvpool" ]; then
	(cd / && PYTHONPATH=$site "$py" -c '
import sys, kvpool
assert kvpool.__file__.startswith(sys.argv[1]), kvpool.__file__
with kvpool.Client(sys.argv[2], pool="default") as c, c.open(list(range(20))) as s:
    s.alloc(20)
    assert len(s.table()[0]) == 2, s.table()
' "$site" "$sock") || fail "python3 -c 'import kvpool' against the installed daemon"
	await_log "^<6>client [0-9]+ connected: pid [0-9]+ uid $(id -u) pool 'default' namespace ''"
fi

# SIGHUP: a new pool is made, a changed one refused, a broken file changes nothing.
cp "$conf" "$root/conf.orig"
printf '\n[pool.extra]\nblocks = 64\nblock_size = 16\ngroups = full\n' >>"$conf"
sed -i 's/^blocks = 512$/blocks = 1024/' "$conf"
kill -HUP "$pid"
await_log "^<6>pool extra created: 64 blocks of 16 tokens"
await_log "^<4>reload: pool default: blocks changed: refused"
"$usr/bin/kvctl" stats -s "$sock" | grep -qE '^extra +16 +64 ' || fail "kvctl stats: no pool extra after SIGHUP"
# Quotas apply at once: root's own ([uid.0]) caps its sequences at 1 from now on.
if [ -d "$site/kvpool" ]; then
	printf '\n[uid.%s]\nmax_sequences = 1\n' "$(id -u)" >>"$conf"
	kill -HUP "$pid"
	await_log "^<5>reload: .*, 1 uid quotas$"
	(cd / && PYTHONPATH=$site "$py" -c '
import sys, kvpool
with kvpool.Client(sys.argv[1], pool="default") as c, c.open([1, 2, 3]):
    try:
        c.open([4, 5, 6])
    except kvpool.QuotaExceeded:
        sys.exit(0)
    sys.exit("a second sequence past max_sequences = 1 was opened")
' "$sock") || fail "[uid.N] max_sequences did not apply at SIGHUP"
fi
echo '[pool.broken' >>"$conf"
kill -HUP "$pid"
await_log "^<3>reload: .*does not load"
cp "$root/conf.orig" "$conf"
kill -HUP "$pid"
await_log "^<6>pool extra destroyed"
"$usr/bin/kvctl" stats -s "$sock" | grep -qE '^default +16 +512 ' || fail "pool default changed by a reload"

kill -TERM "$pid"
wait "$pid" || fail "kvpoold exited $? after SIGTERM"
pid=
[ -S "$sock" ] || fail "kvpoold removed the socket systemd owns"
# systemd-socket-activate's own lines come before the exec: "Listening on", ...
grep -vE '^<[3-7]>|^(Listening on|Communication attempt|Execing) ' "$log" &&
	fail "log lines without a priority prefix under JOURNAL_STREAM"

# The config is the operator's: a second install keeps it; uninstall leaves only it.
echo '; edited' >>"$conf"
make --no-print-directory -s install DESTDIR="$root" >/dev/null
tail -n 1 "$conf" | grep -qx '; edited' || fail "make install overwrote $conf"
make --no-print-directory -s uninstall DESTDIR="$root" >/dev/null
left=$(find "$usr" -type f)
[ -z "$left" ] || fail "make uninstall left: $left"
[ -f "$conf" ] || fail "make uninstall removed $conf"
echo "service: ok"
