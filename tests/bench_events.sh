#!/usr/bin/env bash
# kvbench events, small: one second of commits of 1 and of 64 blocks into a pool
# with kv_events, then 2 rounds of decode steps on two pools alike but for it:
#  - two publish rows: blocks announced a second match the commits (to rounding),
#    every batch sent was received by the subscriber and none dropped;
#  - a decode row with both figures and their ratio;
#  - usage errors exit 2.
# $KVBENCH (default build/bin/kvbench), $KVPOOLD (the daemon kvbench starts).
set -eu
cd "$(dirname "$0")/.."

kvbench=${KVBENCH:-build/bin/kvbench}
kvpoold=${KVPOOLD:-build/bin/kvpoold}
command -v jq >/dev/null || { echo "jq is not installed"; exit 77; }
out=$(mktemp)
trap 'rm -f "$out" "$out.err"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$kvbench" events --seconds 1 --rounds 2 --steps 16 --daemon "$kvpoold" --json >"$out" ||
	fail "kvbench events"
cat "$out"
jq -se 'map(select(.figure == "publish")) | length == 2 and
	(.[0].blocks_per_commit == 1 and .[1].blocks_per_commit == 64) and
	all(.[]; .commits_per_s > 0 and
		(.blocks_per_s - .commits_per_s * .blocks_per_commit | fabs) <= .blocks_per_commit and
		.sent_batches > 0 and .received_batches == .sent_batches and .dropped == 0 and
		.mb_per_s > 0)' "$out" >/dev/null || fail "a publish row is missing or off"
jq -se 'map(select(.figure == "decode")) | length == 1 and
	(.[0].ns_per_step_without > 0 and .[0].ns_per_step_with > 0 and
	 (.[0].slower_percent | type) == "number")' "$out" >/dev/null ||
	fail "the decode row is missing or off"
for bad in "--seconds 0" "--rounds 1" "--steps 8" "--bogus 1" "--seconds"; do
	set +e
	# shellcheck disable=SC2086 # the options are words
	"$kvbench" events $bad >/dev/null 2>"$out.err"
	rc=$?
	set -e
	[ "$rc" = 2 ] && grep -q "^kvbench events: " "$out.err" || fail "'$bad': exit $rc, $(cat "$out.err")"
done
echo "ok: kvbench events: $(jq -sc 'map(.blocks_per_s // .slower_percent)' "$out")"
