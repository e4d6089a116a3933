#!/usr/bin/env bash
# kvbench replay on a trace generated here (multi-turn conversations sharing system prompts,
# Mooncake's JSONL: timestamp, input_length, output_length, hash_ids of 512 tokens):
#  - the JSON row has its fields, and no request failed;
#  - prompt_tokens is the trace's, and ceiling_tokens (a block hits if any earlier request
#    computed it) equals an independent count made here with awk;
#  - a pool too small for the conversations' history: the pool alone hits less than the
#    pool with a host tier, whose hits show as hit_rate_host and bytes copied both ways;
#  - one LRU cache as large as the pool alone hits within a point of what the pool does,
#    and none of pool and tier together beats one LRU cache of their summed size
#    (bench/README.md has how close it comes); a disk tier (lru, then second_sight) at the
#    trace's pace, and in a directory of its own under $TMPDIR, removed after the run and
#    after a SIGINT; the text row; --engines 3 and --speed; usage errors exit 2.
# $KVBENCH (default build/bin/kvbench), $KVPOOLD (the daemon kvbench starts).
set -eu
cd "$(dirname "$0")/.."

kvbench=${KVBENCH:-build/bin/kvbench}
kvpoold=${KVPOOLD:-build/bin/kvpoold}
command -v jq >/dev/null || { echo "jq is not installed"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# 48 conversations of 4 turns on 4 system prompts (bench/conversations.sh says how).
bench/conversations.sh 4 48 4 4 >"$dir/trace.jsonl"

# The ceiling, counted apart: block k (16 tokens) of a request is the trace ids up to its
# last token, and k; it hits if every block up to it was in an earlier request's prompt, and
# never past input_length - 1 tokens.
read -r want_prompt want_ceiling < <(awk -F'[][]' '{
	split($2, ids, ", *")
	match($0, /"input_length": [0-9]+/)
	len = substr($0, RSTART + 16, RLENGTH - 16) + 0
	prompt += len
	hitting = 1
	for (k = 0; k < int(len / 16); k++) {
		key = ""
		for (q = 1; q <= int(((k + 1) * 16 - 1) / 512) + 1; q++)
			key = key "," ids[q]
		key = key ":" k
		if (!(key in seen) || k >= int((len - 1) / 16))
			hitting = 0
		if (hitting)
			ceiling += 16
		seen[key] = 1
	}
} END { print prompt, ceiling }' "$dir/trace.jsonl")

replay() { "$kvbench" replay "$dir/trace.jsonl" --daemon "$kvpoold" --json "$@"; }
replay --pool-tokens 16384 >"$dir/pool.json" || fail "kvbench replay, pool only"
replay --pool-tokens 16384 --tier-host-tokens 65536 >"$dir/tier.json" ||
	fail "kvbench replay with a host tier"
cat "$dir/pool.json" "$dir/tier.json"

for f in pool tier; do
	jq -e 'has("prompt_tokens") and has("hit_rate_pool") and has("hit_rate_host") and
	       has("hit_rate_disk") and has("hit_rate") and has("ceiling") and has("lru_hit_rate") and
	       has("bytes_down_host") and has("bytes_up_host") and has("bytes_down_disk") and
	       has("bytes_up_disk") and has("alloc_p50_us") and has("alloc_p99_us") and
	       has("promoting_alloc_p50_us") and has("promoting_alloc_p99_us") and
	       has("elapsed_s") and .errors == 0 and .requests == 192' "$dir/$f.json" >/dev/null ||
		fail "$f: a field is missing, or a request failed"
	jq -e --argjson p "$want_prompt" --argjson c "$want_ceiling" \
		'.prompt_tokens == $p and .ceiling_tokens == $c' "$dir/$f.json" >/dev/null ||
		fail "$f: prompt_tokens and ceiling_tokens are not $want_prompt and $want_ceiling"
done
# The pool frees a sequence's blocks last first, as the simulated LRU cache caches them.
jq -e '.hit_rate_host == 0 and .bytes_down_host == 0 and .hit_rate == .hit_rate_pool and
       ((.lru_hit_rate - .hit_rate) | if . < 0 then -. else . end) < 0.01' \
	"$dir/pool.json" >/dev/null ||
	fail "pool only: a tier's figures, or a hit rate past 1 point from one LRU cache of its size"
# Pool and tier hold what one LRU cache of their summed size does, so they never hit more; but
# for blocks lost to a copier starved of a core (counted unoffered): the tier then keeps older
# blocks longer, which on a trace that comes round like this one (LRU's worst case) may hit
# more, and only the ceiling bounds it.
jq -e --slurpfile p "$dir/pool.json" '.hit_rate > $p[0].hit_rate + 0.03 and .hit_rate_host > 0 and
       .bytes_down_host > 0 and .bytes_up_host > 0 and .promoting_allocs > 0 and
       .hit_rate_pool == $p[0].hit_rate_pool and .hit_rate <= .ceiling and
       .hit_rate <= (if .host_unoffered_blocks == 0 then .lru_hit_rate else .ceiling end)' \
	"$dir/tier.json" >/dev/null ||
	fail "with a tier: not above the pool alone, or above one LRU cache of their summed size"

# A disk tier at the trace's pace (a disk takes what arrives): it hits, its bytes go both ways
# on disk, none on the host; second_sight declines blocks; the files are gone after. With
# every evicted block offered it hits at most what one LRU cache of the summed size does; with
# a starved copier, as above (two busy loops on this VM's 2 cores: half the rescues
# overwritten, 0.44 against LRU's 0.334, the tier never over its capacity), the ceiling.
disk=$(mktemp -d /var/tmp/kvpool-test-replay.XXXXXX)
trap 'rm -rf "$dir" "$disk"' EXIT
for policy in lru second_sight; do
	replay --pool-tokens 16384 --tier-disk-tokens 65536 --tier-disk-path "$disk" \
		--tier-policy "$policy" --speed 1 >"$dir/disk-$policy.json" ||
		fail "kvbench replay with a disk tier ($policy)"
	cat "$dir/disk-$policy.json"
done
jq -e --slurpfile p "$dir/pool.json" '.tier_policy == "lru" and .tier_disk_tokens == 65536 and
       .hit_rate_disk > 0 and .hit_rate_host == 0 and .bytes_down_disk > 0 and
       .bytes_up_disk > 0 and .bytes_down_host == 0 and .tier_declined_blocks == 0 and
       .errors == 0 and .hit_rate > $p[0].hit_rate and
       .hit_rate <= (if .disk_unoffered_blocks == 0 then .lru_hit_rate else .ceiling end)' \
	"$dir/disk-lru.json" >/dev/null || fail "with a disk tier: its figures"
jq -e '.tier_policy == "second_sight" and .tier_declined_blocks > 0 and .errors == 0' \
	"$dir/disk-second_sight.json" >/dev/null || fail "second_sight: nothing declined"
[ -z "$(ls -A "$disk")" ] || fail "left in the disk tier's directory: $(ls "$disk")"

# Without --tier-disk-path, a directory of kvbench's own under $TMPDIR, gone after the run and
# after a SIGINT in the middle of one; the row counts the tier's capacity in blocks (65536
# tokens of blocks of 16).
tmp=$(mktemp -d /var/tmp/kvpool-test-tmpdir.XXXXXX)
trap 'rm -rf "$dir" "$disk" "$tmp"' EXIT
TMPDIR=$tmp replay --pool-tokens 16384 --tier-disk-tokens 65536 --speed 1000 \
	>"$dir/default-dir.json" || fail "kvbench replay, disk tier in \$TMPDIR"
jq -e '.tier_disk_tokens == 65536 and .tier_disk_blocks == 4096 and .hit_rate_disk > 0 and
       .errors == 0' "$dir/default-dir.json" >/dev/null || fail "disk tier in \$TMPDIR: its figures"
[ -z "$(ls -A "$tmp")" ] || fail "left in \$TMPDIR: $(ls "$tmp")"
# kvbench itself in the background (a shell function's subshell would get the signal)
TMPDIR=$tmp "$kvbench" replay "$dir/trace.jsonl" --daemon "$kvpoold" --pool-tokens 16384 \
	--tier-disk-tokens 65536 --speed 0.25 >/dev/null 2>&1 &
pid=$!
for _ in $(seq 200); do [ -n "$(find "$tmp" -name '*.kvtier')" ] && break; sleep 0.05; done
[ -n "$(find "$tmp" -name '*.kvtier')" ] || fail "no tier file under \$TMPDIR while it runs"
kill -INT $pid
wait $pid && fail "kvbench replay exited 0 after SIGINT"
[ -z "$(ls -A "$tmp")" ] || fail "left in \$TMPDIR after SIGINT: $(find "$tmp")"
for _ in $(seq 100); do pgrep -f "replay $dir/trace.jsonl" >/dev/null || break; sleep 0.05; done
pgrep -af "replay $dir/trace.jsonl" && fail "kvbench's engines outlived it"

"$kvbench" replay "$dir/trace.jsonl" --daemon "$kvpoold" --pool-tokens 16384 \
	--tier-host-tokens 65536 --engines 3 --speed 1000 >"$dir/text.out" || fail "--engines 3"
grep -qE "^replay .*trace.jsonl: 192 requests, $want_prompt prompt tokens, engines 3, .* 0 errors; " \
	"$dir/text.out" || { cat "$dir/text.out"; fail "the text row"; }
for bad in "--pool-tokens 0" "--kv-bytes-per-token 12" "--tier-disk-tokens 1" "--speed 0" \
	   "--tier-policy fifo" "--tier-host-tokens 1 --tier-disk-tokens 1 --tier-disk-path /" \
	   "--bogus 1"; do
	set +e
	# shellcheck disable=SC2086 # the options are words
	"$kvbench" replay "$dir/trace.jsonl" $bad >/dev/null 2>"$dir/err"
	rc=$?
	set -e
	[ "$rc" = 2 ] && grep -q "^kvbench replay: " "$dir/err" || fail "'$bad': exit $rc, $(cat "$dir/err")"
done
echo '{"timestamp": 0, "input_length": 1024, "output_length": 1, "hash_ids": [1]}' >"$dir/short.jsonl"
if "$kvbench" replay "$dir/short.jsonl" 2>"$dir/err"; then fail "a line whose hash_ids are short"; fi
grep -q "line 1: 1 hash_ids cover 512 tokens, input_length is 1024" "$dir/err" ||
	fail "short hash_ids: $(cat "$dir/err")"
echo "ok: kvbench replay: $want_prompt prompt tokens, ceiling $want_ceiling; tier above pool alone"
