#!/usr/bin/env bash
# kvtrace's command-line contract: exit codes, error messages, and that output
# printed before an error is kept. Usage: kvtrace_cli.sh PATH-TO-KVTRACE
set -u
kvtrace=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0

# check NAME WANT-EXIT WANT-STDOUT WANT-STDERR-SUBSTRING < trace
check() {
	local name=$1 want_rc=$2 want_out=$3 want_err=$4 rc
	"$kvtrace" - >"$tmp/out" 2>"$tmp/err"
	rc=$?
	local err_ok=true
	if [ -z "$want_err" ]; then
		[ -s "$tmp/err" ] && err_ok=false
	elif ! grep -qF -- "$want_err" "$tmp/err"; then
		err_ok=false
	fi
	if [ "$rc" != "$want_rc" ] || [ "$(cat "$tmp/out")" != "$want_out" ] || ! $err_ok; then
		echo "$name: exit $rc (want $want_rc)"
		echo "  stdout: $(cat "$tmp/out")"
		echo "  stderr: $(cat "$tmp/err")"
		failures=$((failures + 1))
	fi
}

check "expect mismatch keeps output, exit 1" 1 "stats free=3 used=0 cached=0" \
	"kvtrace: line 4: expected 'stats free=2 used=0 cached=0', got 'stats free=3 used=0 cached=0'" <<'T'
pool blocks=4 block_size=2
group full
stats
expect stats free=2 used=0 cached=0
stats
T
check "unknown command" 2 "" "kvtrace: line 3: unknown command 'frob'" <<'T'
pool blocks=4 block_size=2
group full
frob x
T
check "second pool" 2 "" "kvtrace: line 3: a second pool" <<'T'
pool blocks=4 block_size=2
group full
pool blocks=4 block_size=2
T
check "command before pool" 2 "" "kvtrace: line 2:" <<'T'
# comment first is fine
stats
T
check "group after body" 2 "stats free=3 used=0 cached=0" "kvtrace: line 4:" <<'T'
pool blocks=4 block_size=2
group full
stats
group full
T
check "bad number" 2 "" "kvtrace: line 4: bad number" <<'T'
pool blocks=4 block_size=2
group full
seq a 1 2
alloc a 1x
T
check "negative number" 2 "" "kvtrace: line 3: bad number" <<'T'
pool blocks=4 block_size=2
group full
seq a -1
T
check "unknown key" 2 "" "kvtrace: line 3: unknown argument 'colour=red'" <<'T'
pool blocks=4 block_size=2
group full
seq a 1 colour=red
T
check "unknown pool key" 2 "" "kvtrace: line 1: unknown argument" <<'T'
pool blocks=4 block_size=2 flavour=x
group full
T
check "wrong argument count" 2 "" "kvtrace: line 3: usage: lookup ID" <<'T'
pool blocks=4 block_size=2
group full
lookup a b
T
check "swa window below 2" 2 "" "kvtrace: line 2:" <<'T'
pool blocks=4 block_size=2
group swa 1
T
check "blocks out of range" 2 "" "kvtrace: line 1:" <<'T'
pool blocks=1 block_size=2
group full
T
check "missing group" 2 "" "pool needs a group" <<'T'
pool blocks=4 block_size=2
T
check "token repeat of zero" 2 "" "kvtrace: line 3:" <<'T'
pool blocks=4 block_size=2
group full
seq a 5*0
T
check "token too large" 2 "" "kvtrace: line 3:" <<'T'
pool blocks=4 block_size=2
group full
seq a 4294967296
T
check "a prefix longer than the tokens is refused, however long" 0 "seq a invalid
seq a invalid
table a []" "" <<'T'
pool blocks=4 block_size=2
group rswa 2
seq a 1 2 prefix=3
seq a 1 2 prefix=99999999999
seq a 1 2 prefix=2
table a
T
check "comments, blanks and t*n" 0 "alloc a ok [1,2,3]
table a [1,2,3]" "" <<'T'

   # an indented comment
pool	blocks=4   block_size=2
group full
seq a 7*4 4294967295
alloc a 5
	expect   alloc a ok [1,2,3]   
table a
T

if ! "$kvtrace" --help | grep -q '^Usage: kvtrace'; then
	echo "--help prints no usage"
	failures=$((failures + 1))
fi
"$kvtrace" >/dev/null 2>&1
if [ $? != 2 ]; then
	echo "no FILE: want exit 2"
	failures=$((failures + 1))
fi
"$kvtrace" "$tmp/does-not-exist" >/dev/null 2>&1
if [ $? != 2 ]; then
	echo "missing file: want exit 2"
	failures=$((failures + 1))
fi
[ "$failures" -eq 0 ]
