#!/usr/bin/env bash
# kvbench capacity: every preset at every default context, (b) <= (c) and within 2 blocks a
# group a sequence of it, (a) <= (b), counts that agree with the blocks a sequence holds, and
# some counts worked out by hand; a custom --layers pattern; usage errors exit 2.
set -eu
cd "$(dirname "$0")/.." || exit 1
kvbench=${KVBENCH:-build/bin/kvbench}
fail() { echo "FAIL: $*"; exit 1; }
command -v jq >/dev/null || { echo "jq is not installed"; exit 77; }

json=$("$kvbench" capacity --json) || fail "kvbench capacity --json: exit $?"

for model in llama3-8b mistral-7b gemma3-27b gpt-oss-20b rswa; do
	for context in 8192 32768 131072; do
		n=$(jq -s --arg m "$model" --argjson c "$context" \
			'[.[] | select(.model == $m and .context_tokens == $c)] | length' <<<"$json")
		[ "$n" = 1 ] || fail "$n rows for $model at $context tokens"
	done
done
[ "$(jq -s length <<<"$json")" = 15 ] || fail "not 15 rows: $json"

# Rules for every row with a count; pool_blocks - 1 usable blocks (the null block) and the last
# sequence's prefill peak tell the count: k fit while (k - 1) x held + peak <= pool_blocks - 1.
rules='select(.seqs_kvpool > 0) |
	select(.seqs_kvpool > .seqs_bound
	       or .blocks_per_seq_kvpool > .blocks_per_seq_bound + 2 * .groups
	       or .blocks_per_seq_kvpool < .blocks_per_seq_bound
	       or .seqs_full_accounting > .seqs_kvpool
	       or .seqs_kvpool != ((.pool_blocks - 1 - .peak_blocks_per_seq_kvpool)
				   / .blocks_per_seq_kvpool | floor) + 1
	       or .seqs_bound != ((.budget_bytes / .bytes_per_block | floor)
				  / .blocks_per_seq_bound | floor)
	       or (.cores | type) != "number")'
bad=$(jq -c "$rules" <<<"$json")
[ -z "$bad" ] || fail "rows breaking the rules: $bad"
[ "$(jq -s -c 'map(.budget_bytes) | unique' <<<"$json")" = "[68719476736]" ] ||
	fail "the default budget is not 64 GiB"

# Hand-worked rows, 64 GiB of bf16, block_size 16, S = 2048 (a block of one layer: 16 tokens x
# kv_heads x head_dim x 2 (K, V) x 2 bytes).
#  llama3-8b at 8192: 16*8*128*2*2 * 32 layers = 2 MiB a block, 32768 blocks; 512 a sequence:
#   (c) 32768/512 = 64; (b) = (a) = floor(32767/512) = 63, the null block short.
#  mistral-7b at 131072: 1 group of 32, 2 MiB, 32768 blocks; swa 4096 keeps 4095 tokens, blocks
#   7936..8191 = 256 = cdiv(4095, 16): (c) 128; the last ALLOC (at 129024 computed) holds
#   256 + 2048/16 = 384, so k fit while (k-1)*256 + 384 <= 32767: (b) 127; (a) 32767/8192 = 3.
#  gemma3-27b at 8192: 52 swa, 10 full: groups of 10, 6 swa (8 slots padding) + 1 full; a block
#   16*16*128*2*2 * 10 = 1.25 MiB, 52428 blocks; a sequence 512 + 6 x cdiv(1023, 16) = 896:
#   (c) floor(52428/896) = 58; the last ALLOC holds 512 + 6 x (64 + 128) = 1664, so
#   (b) floor((52427 - 1664)/896) + 1 = 57; (a) 62 layers, 7.75 MiB a block, 8456 blocks,
#   floor(8455/512) = 16.
#  gpt-oss-20b at 32768: 2 groups of 12, 16*8*64*2*2 * 12 = 384 KiB, 174762 blocks; a sequence
#   2048 + cdiv(127, 16) = 2056: (c) floor(174762/2056) = 85; peak 2048 + 8 + 128 = 2184:
#   (b) floor((174761 - 2184)/2056) + 1 = 84; (a) 768 KiB, 87381 blocks, floor(87380/2048) = 42.
#  rswa at 32768: prefix 2048 = 128 blocks + the window's 4096 tokens from 28672, 256 blocks =
#   384 = cdiv(2048 + 4095, 16): (c) floor(32768/384) = 85; peak 128 + 256 + 128 = 512:
#   (b) floor((32767 - 512)/384) + 1 = 84; (a) floor(32767/2048) = 15.
expect() { # model context (a) (b) (c) blocks_per_seq_kvpool
	local got
	got=$(jq -s -r --arg m "$1" --argjson c "$2" '.[] | select(.model == $m and .context_tokens == $c)
		| "\(.seqs_full_accounting) \(.seqs_kvpool) \(.seqs_bound) \(.blocks_per_seq_kvpool)"' \
		<<<"$json")
	[ "$got" = "$3 $4 $5 $6" ] || fail "$1 at $2: (a) (b) (c) blocks $got, not $3 $4 $5 $6"
}
expect llama3-8b 8192 63 63 64 512
expect mistral-7b 131072 3 127 128 256
expect gemma3-27b 8192 16 57 58 896
expect gpt-oss-20b 32768 42 84 85 2056
expect rswa 32768 15 84 85 384
got=$(jq -s -c '[.[] | select(.model == "gemma3-27b")
	| [.groups, .layers_per_group, .bytes_per_block, .pool_blocks]] | unique' <<<"$json")
[ "$got" = "[[7,10,1310720,52428]]" ] || fail "gemma3-27b: groups, layers, bytes, blocks $got"

# A pattern of our own: full*2 and swa:64*4 make 3 groups of 2 layers (the 4 swa layers in 2);
# a block 16*2*64*2*2 * 2 = 16 KiB, 4 MiB = 256 blocks; (a) 6 layers, 48 KiB, 85 blocks.
#  At 1024: 64 + 2 x 4 = 72 blocks a sequence: (c) floor(256/72) = 3; chunks of 64 tokens, the
#   last ALLOC holds 64 + 2 x 8 = 80, (b) floor((255 - 80)/72) + 1 = 3; (a) floor(84/64) = 1.
#  At 1000: the window's 63 tokens 937..999 straddle blocks 58..62, 5 not cdiv(63, 16) = 4:
#   73 a sequence against the bound's 71; (c) floor(256/71) = 3, (b) 3 all the same.
custom=$("$kvbench" capacity --json --layers "full*2,swa:64*4" --kv-heads 2 --head-dim 64 \
	--budget-mib 4 --context 1000,1024 --max-step-tokens 64) || fail "custom pattern: exit $?"
got=$(jq -s -c 'map([.context_tokens, .groups, .layers_per_group, .bytes_per_block, .pool_blocks,
	.seqs_full_accounting, .seqs_kvpool, .seqs_bound, .blocks_per_seq_kvpool,
	.blocks_per_seq_bound])' <<<"$custom")
[ "$got" = "[[1000,3,2,16384,256,1,3,3,73,71],[1024,3,2,16384,256,1,3,3,72,72]]" ] ||
	fail "custom pattern: $got"
bad=$(jq -c "$rules" <<<"$custom")
[ -z "$bad" ] || fail "custom rows breaking the rules: $bad"

# The text table: a section per preset, each with its limit line.
text=$("$kvbench" capacity) || fail "kvbench capacity: exit $?"
for model in llama3-8b mistral-7b gemma3-27b gpt-oss-20b rswa; do
	grep -q "^$model: " <<<"$text" || fail "no $model section in: $text"
done
[ "$(grep -c '^# limit: ' <<<"$text")" = 5 ] || fail "not 5 limit lines in: $text"

for args in "--layers full*2,bogus:3" "--layers swa:1" "--layers full:4" "--model nope" \
	"--context 0" "--dtype fp8" "--kv-heads 4" "--budget-gib 0" "--frobnicate"; do
	set +e
	# shellcheck disable=SC2086 # the arguments are words
	err=$("$kvbench" capacity $args 2>&1 >/dev/null)
	rc=$?
	set -e
	[ $rc = 2 ] || fail "kvbench capacity $args: exit $rc, not 2"
	[ -n "$err" ] || fail "kvbench capacity $args: no message"
done
echo "bench capacity: 15 preset rows, bounds, hand counts, custom pattern and usage errors ok"
