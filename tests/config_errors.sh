#!/usr/bin/env bash
# The config file's errors (kvpool.conf(5)): each kind exactly as kvpoold prints it,
# "kvpoold: FILE:LINE: ...", every error of a file and not only the first, exit status 1
# before the daemon listens; then a config setting every [daemon] key starts, and stops
# with exit status 0 at SIGTERM.
set -eu
cd "$(dirname "$0")/.." || exit 1
daemon=${KVPOOLD:-build/bin/kvpoold}
tmp=$(mktemp -d)
pid=
cleanup() {
	[ -z "$pid" ] || kill -TERM "$pid" 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT
# Log lines as on a terminal, "kvpoold: " first, whoever runs the test.
unset JOURNAL_STREAM
failed=0 cases=0

# expect NAME 'LINE: MESSAGE'... <CONFIG: kvpoold -c CONFIG exits 1 having printed exactly
# these lines, each as "kvpoold: CONFIG:LINE: MESSAGE".
expect() {
	local name=$1 cfg=$tmp/$1.conf want out rc=0
	shift
	cat >"$cfg"
	want=$(printf "kvpoold: $cfg:%s\n" "$@")
	# A config that loads would start the daemon: timeout stops it (exit 124, a failure).
	timeout 5 "$daemon" -s "$tmp/sock" -c "$cfg" >/dev/null 2>"$tmp/err" || rc=$?
	out=$(cat "$tmp/err")
	cases=$((cases + 1))
	if [ "$rc" != 1 ] || [ "$out" != "$want" ]; then
		failed=$((failed + 1))
		echo "FAIL $name: exit status $rc (want 1), stderr:"
		sed 's/^/    /' "$tmp/err"
		echo "  want:"
		printf '%s\n' "$want" | sed 's/^/    /'
	fi
}

# The issue's own: an unclosed header was reported as "[] blocks = 512". Its keys are not
# looked at (they belong to no section).
expect unclosed "1: unclosed section header '[pool.default' (no ']')" <<'EOF'
[pool.default
blocks = 512
block_size = 16
groups = full swa:64
EOF

expect duplicate-pool "6: [pool.a] appears twice (first at line 1)" <<'EOF'
[pool.a]
blocks = 16
block_size = 4
groups = full

[pool.a]
blocks = 32
EOF

expect duplicate-daemon "4: [daemon] appears twice (first at line 2)" <<'EOF'
; comments and blank lines count
[daemon]
spin_us = 10
[daemon]
budget = 8
EOF

expect unknown-section \
	"1: unknown section [pools.a] (sections: [daemon], [pool.NAME], [namespace.NAME], [quota], [uid.N])" \
	<<'EOF'
[pools.a]
blocks = 16
EOF

expect unknown-key \
	"2: [daemon] unknown key 'sockett' (keys: socket, socket_group, spin_us, budget, max_clients, event_loop, plugin_dir, threads, log_level, max_host_bytes)" \
	"4: [quota] unknown key 'max_seqs' (keys: max_clients, max_sequences, max_tokens, max_arena_bytes, max_blocks, max_tier_bytes)" \
	<<'EOF'
[daemon]
sockett = /tmp/x
[quota]
max_seqs = 5
EOF

# Indented, still a key of its own (inih would take it for a continuation of groups).
expect duplicate-key "5: [pool.a] blocks set twice (first at line 2)" <<'EOF'
[pool.a]
blocks = 16
block_size = 4
groups = full
    blocks = 32
EOF

# A value is one line: no continuation.
expect continuation "5: syntax error: 'swa:64' is not key = value" <<'EOF'
[pool.a]
blocks = 16
block_size = 4
groups = full
    swa:64
EOF

expect before-section "1: syntax error: key 'blocks' before any [section]" <<'EOF'
blocks = 16
[pool.a]
blocks = 16
block_size = 4
groups = full
EOF

expect not-key-value "2: syntax error: 'max_blocks 100' is not key = value" \
	"3: syntax error: no key before '='" <<'EOF'
[quota]
max_blocks 100
= 100
EOF

expect blocks-range "2: [pool.a] blocks = 1: out of range (2..16777216)" <<'EOF'
[pool.a]
blocks = 1
block_size = 4
groups = full
EOF

# Every error of the file, the command line's ranges.
expect daemon-values \
	"2: [daemon] spin_us = 1000001: out of range (0..1000000)" \
	"3: [daemon] budget = 0: out of range (1..1048576)" \
	"4: [daemon] max_clients = 65537: out of range (1..65536)" \
	"5: [daemon] threads = 1025: out of range (1..1024)" \
	"6: [daemon] threads set twice (first at line 5)" \
	"7: [daemon] event_loop = x: not one of auto, io_uring, epoll" \
	"8: [daemon] log_level = loud: not one of error, warning, notice, info, debug" \
	"9: [daemon] spin_us set twice (first at line 2)" \
	"10: [daemon] socket = : empty (the listening socket's path)" <<'EOF'
[daemon]
spin_us = 1000001
budget = 0
max_clients = 65537
threads = 1025
threads = 4
event_loop = x
log_level = loud
spin_us = 10
socket =
EOF

expect groups \
	"4: [pool.a] groups = full sliding:64: unknown kind 'sliding' (kinds: full, swa:W, rswa:W, chunked:C, cyclic:W)" \
	"8: [pool.b] groups = full swa:1: 'swa:1': window out of range (2..1073741824) (kinds: full, swa:W, rswa:W, chunked:C, cyclic:W)" \
	"12: [pool.c] groups = full chunked: 'chunked': needs a chunk size (kinds: full, swa:W, rswa:W, chunked:C, cyclic:W)" \
	<<'EOF'
[pool.a]
blocks = 16
block_size = 4
groups = full sliding:64
[pool.b]
blocks = 16
block_size = 4
groups = full swa:1
[pool.c]
blocks = 16
block_size = 4
groups = full chunked
EOF

expect quotas \
	"2: [quota] max_blocks = lots: not a number or unlimited" \
	"4: [uid.1000] max_tokens = -1: not a number or unlimited" \
	"6: [namespace.team] uids = 1000 bob: not a list of uids (numbers): 'bob'" \
	"7: [namespace.team] max_clients = 2.5: not a number or unlimited" \
	"9: [namespace.big] uids = 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17: more than 16 uids" \
	"10: [uid.root] uid: not a number (0..4294967294)" <<'EOF'
[quota]
max_blocks = lots
[uid.1000]
max_tokens = -1
[namespace.team]
uids = 1000 bob
max_clients = 2.5
[namespace.big]
uids = 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17
[uid.root]
max_tokens = 5
EOF

expect names \
	"1: [pool.a-name-that-is-longer-than-31-bytes] pool name: too long (at most 31 bytes)" \
	"7: [pool.a] namespace = a-namespace-longer-than-31-bytes: too long (at most 31 bytes)" \
	"8: [namespace.another-namespace-longer-than-31-bytes] namespace name: too long (at most 31 bytes)" \
	<<'EOF'
[pool.a-name-that-is-longer-than-31-bytes]
blocks = 16
[pool.a]
blocks = 16
block_size = 4
groups = full
namespace = a-namespace-longer-than-31-bytes
[namespace.another-namespace-longer-than-31-bytes]
uids = 1000
EOF

# At the pool's header line, once the section has ended.
expect missing "1: [pool.a] needs blocks, block_size and groups (missing: block_size, groups)" <<'EOF'
[pool.a]
blocks = 16
kv_heads = 2
[quota]
max_blocks = 10
EOF

# A limit across keys (pool_check.c's), at the header line too.
expect across-keys "1: [pool.a] publish alloc: must be commit for a pool with KV" <<'EOF'
[pool.a]
blocks = 16
block_size = 4
groups = full
kv_heads = 2
head_dim = 8
layers_per_group = 1
publish = alloc
EOF

cases=$((cases + 1))
out=$(timeout 5 "$daemon" -s "$tmp/sock" -c "$tmp/none.conf" 2>&1 >/dev/null) && rc=0 || rc=$?
want="kvpoold: $tmp/none.conf: No such file or directory"
if [ "$rc" != 1 ] || [ "$out" != "$want" ]; then
	failed=$((failed + 1))
	echo "FAIL no-file: exit status $rc, stderr '$out' (want 1, '$want')"
fi

# Every [daemon] key, inline comments, indented keys and a byte order mark: it starts. The
# command line's socket wins over the file's; log_level warning hides the notices.
cases=$((cases + 1))
group=$(id -gn)
printf '\xef\xbb\xbf' >"$tmp/good.conf"
cat >>"$tmp/good.conf" <<EOF
; every [daemon] key
[daemon]              ; the daemon's own settings
socket = $tmp/not-this.sock
socket_group = $group
spin_us = 0
budget = 32
max_clients = 16      ; few
event_loop = epoll
plugin_dir = $tmp
threads = 2
log_level = warning
max_host_bytes = 1073741824

[pool.p]
    blocks = 16
    block_size = 4
    groups = full swa:8,chunked:16
    namespace = team  ; only team's clients

[namespace.team]
uids = 1000, 1001	1002
max_blocks = unlimited

[quota]
max_clients = 3

[uid.0]
max_tokens = 1000
EOF
"$daemon" -s "$tmp/sock" -c "$tmp/good.conf" >/dev/null 2>"$tmp/err" &
pid=$!
for _ in $(seq 100); do
	[ -S "$tmp/sock" ] || ! kill -0 "$pid" 2>/dev/null && break
	sleep 0.05
done
if [ -S "$tmp/sock" ] && [ ! -e "$tmp/not-this.sock" ]; then
	kill -TERM "$pid"
	rc=0
	wait "$pid" || rc=$?
	pid=
	if [ "$rc" != 0 ] || [ -s "$tmp/err" ]; then
		failed=$((failed + 1))
		echo "FAIL good config: exit status $rc after SIGTERM (want 0), stderr (want none):"
		sed 's/^/    /' "$tmp/err"
	fi
else
	failed=$((failed + 1))
	echo "FAIL good config: no socket at $tmp/sock (or one at $tmp/not-this.sock), stderr:"
	sed 's/^/    /' "$tmp/err"
fi

# The host pools' KV memory together, against max_host_bytes: pool a's 512 KiB fit in 1 MB, with
# pool b's they do not. The refusal gives both figures and the limit; the daemon exits 1.
cases=$((cases + 1))
cat >"$tmp/host.conf" <<EOF
[daemon]
max_host_bytes = 1000000
[pool.a]
blocks = 64
block_size = 16
groups = full
kv_heads = 1
head_dim = 64
layers_per_group = 1
[pool.b]
blocks = 64
block_size = 16
groups = full
kv_heads = 1
head_dim = 64
layers_per_group = 1
EOF
rc=0
timeout 5 "$daemon" -s "$tmp/sock" -c "$tmp/host.conf" >/dev/null 2>"$tmp/err" || rc=$?
want="kvpoold: pool b: KV memory of 0.5 MiB: with the host pools' 0.5 MiB, past max_host_bytes 1000000 (1.0 MiB)"
if [ "$rc" != 1 ] || [ "$(grep 'pool b' "$tmp/err")" != "$want" ]; then
	failed=$((failed + 1))
	echo "FAIL max_host_bytes: exit status $rc (want 1), stderr:"
	sed 's/^/    /' "$tmp/err"
	echo "  want:"
	printf '%s\n' "$want" | sed 's/^/    /'
fi

if [ "$failed" != 0 ]; then
	echo "config_errors: $failed of $cases failed"
	exit 1
fi
echo "ok: $cases configs: each error kind as FILE:LINE: ..., all of a file's, exit status 1;" \
	"every [daemon] key: starts, SIGTERM exits 0"
