#!/usr/bin/env bash
# kvbench tier-disk, small: a 1 GiB disk tier in a directory of its own under
# /var/tmp (a disk, not tmpfs) filled, promotions timed, the daemon restarted:
#  - the JSON row has its fields; 1 GiB is 4096 blocks of 256 KiB, each held once; promotions
#    moved bytes; after the restart blocks were restored and the first ALLOC hit
#    a stored prompt's 63 full blocks (1008 tokens), well under the 2 s target;
#  - the tier's file and fio's are gone after the run;
#  - fio's figures where fio is installed, 0 where it is not;
#  - usage errors exit 2.
# $KVBENCH (default build/bin/kvbench), $KVPOOLD (the daemon kvbench starts).
set -eu
cd "$(dirname "$0")/.."

kvbench=${KVBENCH:-build/bin/kvbench}
kvpoold=${KVPOOLD:-build/bin/kvpoold}
command -v jq >/dev/null || { echo "jq is not installed"; exit 77; }
dir=$(mktemp -d /var/tmp/kvpool-bench-tier.XXXXXX)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$kvbench" tier-disk --dir "$dir" --gib 1 --promotions 4 --daemon "$kvpoold" --json \
	>"$dir/row.json" || fail "kvbench tier-disk"
cat "$dir/row.json"
jq -e '.benchmark == "tier-disk" and .tier_gib == 1 and .block_bytes == 262144 and
       .slots == 4096 and .stored_blocks >= .slots and .promotion_mb_per_s > 0 and
       .promotion_daemon_mb_per_s > 0 and .restored_blocks > 0 and
       .first_hit_tokens == 1008 and .restart_to_first_hit_s < 2' "$dir/row.json" >/dev/null ||
	fail "a figure is missing or off"
if command -v fio >/dev/null; then
	jq -e '.fio_mb_per_s_depth32 > 0 and .fio_mb_per_s_depth64 > 0' "$dir/row.json" >/dev/null ||
		fail "fio is installed, but its figures are 0"
else
	jq -e '.fio_mb_per_s_depth32 == 0' "$dir/row.json" >/dev/null || fail "fio figures without fio"
fi
left=$(find "$dir" -name '*.kvtier' -o -name 'fio.dat')
[ -z "$left" ] || fail "left behind: $left"
for bad in "" "--dir $dir --gib 0" "--dir $dir --promotions 16" "--dir $dir --bogus 1"; do
	set +e
	# shellcheck disable=SC2086 # the options are words
	"$kvbench" tier-disk $bad >/dev/null 2>"$dir/err"
	rc=$?
	set -e
	[ "$rc" = 2 ] && grep -q "^kvbench tier-disk: " "$dir/err" || fail "'$bad': exit $rc, $(cat "$dir/err")"
done
echo "ok: kvbench tier-disk: $(jq -c '{promotion_mb_per_s, fio_mb_per_s_depth32, restart_to_first_hit_s}' "$dir/row.json")"
