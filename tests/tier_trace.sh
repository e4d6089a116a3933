#!/usr/bin/env bash
# A pool and its host tier against one LRU cache of their summed size, on a production trace:
# the last 300 requests of Mooncake's FAST'25 synthetic trace (tests/replay/README), 6.9 M
# prompt tokens, replayed back to back through a pool of 250k tokens and a host tier of 500k,
# where one LRU cache's hit rate climbs 3.4 points a 100k tokens (0.38 at 500k, 0.55 at 1M):
#  - the LRU figure is worked out here, apart from kvbench (Python: a block is the trace ids up
#    to its last token and its index; a request hits its prompt's blocks up to the first
#    missing one, at most input_length - 1 tokens; then its blocks are cached last first, as
#    the pool frees a sequence's), and kvbench's own lru_hit_rate must agree with it;
#  - the pool alone hits exactly what one LRU cache of its size does;
#  - pool and tier together hit within 1 point of one LRU cache of their summed size, and no
#    request failed; the tier's counters add up: every block the pool evicted is in it, or
#    counted unoffered.
# $KVBENCH (default build/bin/kvbench), $KVPOOLD (the daemon kvbench starts).
set -eu
cd "$(dirname "$0")/.."

kvbench=${KVBENCH:-build/bin/kvbench}
kvpoold=${KVPOOLD:-build/bin/kvpoold}
trace=tests/replay/mooncake-synthetic-last300.jsonl
command -v jq >/dev/null || { echo "jq is not installed"; exit 77; }
command -v python3 >/dev/null || { echo "python3 is not installed"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

lru() {
	python3 - "$trace" "$1" <<'EOF'
import collections, json, sys

bs, cap = 16, int(sys.argv[2]) // 16
cache, hit, prompt = collections.OrderedDict(), 0, 0
for line in open(sys.argv[1]):
    r = json.loads(line)
    n, ids = r["input_length"], r["hash_ids"]
    prompt += n
    keys = [(tuple(ids[:((k + 1) * bs - 1) // 512 + 1]), k) for k in range(n // bs)]
    for k in range((n - 1) // bs):
        if keys[k] not in cache:
            break
        hit += bs
    for key in reversed(keys):
        if key in cache:
            cache.move_to_end(key)
        else:
            cache[key] = True
            if len(cache) > cap:
                cache.popitem(last=False)
print(f"{hit / prompt:.6f}")
EOF
}

replay() { "$kvbench" replay "$trace" --daemon "$kvpoold" --no-decode --json "$@"; }
replay --pool-tokens 250000 >"$dir/pool.json" || fail "kvbench replay, pool only"
replay --pool-tokens 250000 --tier-host-tokens 500000 >"$dir/tier.json" ||
	fail "kvbench replay with a host tier"
cat "$dir/pool.json" "$dir/tier.json"
pool_lru=$(lru 250000)
sum_lru=$(lru 750000)
echo "one LRU cache, worked out here: 250k tokens $pool_lru, 750k tokens $sum_lru"

jq -e --argjson want "$pool_lru" '.errors == 0 and .hit_rate_host == 0 and
       ((.hit_rate - $want) | if . < 0 then -. else . end) < 0.0001' "$dir/pool.json" >/dev/null ||
	fail "the pool alone does not hit what one LRU cache of its size does ($pool_lru)"
jq -e --argjson want "$sum_lru" '((.lru_hit_rate - $want) | if . < 0 then -. else . end) < 0.0001' \
	"$dir/tier.json" >/dev/null || fail "kvbench's lru_hit_rate is not $sum_lru"
jq -e --argjson want "$sum_lru" '.errors == 0 and .hit_rate > $want - 0.01 and
       .hit_rate < $want + 0.01' "$dir/tier.json" >/dev/null ||
	fail "pool and tier hit $(jq .hit_rate "$dir/tier.json"), not within 1 point of $sum_lru"
jq -e '.host_unoffered_blocks == ([.tier_unoffered[]] | add) and
       .host_stored_blocks > 0 and .pool_evicted_blocks > 0' "$dir/tier.json" >/dev/null ||
	fail "the tier's unoffered blocks do not add up"
echo "ok: pool and tier $(jq .hit_rate "$dir/tier.json") against one LRU cache's $sum_lru"
