#!/usr/bin/env bash
# kvbench replay --nodes: a fleet of kvpoold on one cluster tier the run starts
# (--redis-cluster), on conversations generated here (bench/conversations.sh):
#  - the row has nodes, route, remote_timeouts and per_node (each node's hit rates), also
#    with --nodes 1 and no cluster tier (1, round_robin, 0, one entry);
#  - two nodes round robin without the cluster tier hit less than with it, with it at least
#    0.95 of one LRU cache of the fleet's memory (#58's target), the cluster's
#    hits showing as hit_rate_remote (every node's), bytes both ways, and each node's
#    hit rates summing to its row; requests split evenly between the nodes;
#  - --route session keeps a conversation on one node: without the cluster it hits more
#    than round robin; --route random with a seed: the same split on a second run;
#  - the Redis servers and their directory are gone after the run;
#  - usage errors exit 2: --tier-remote with --redis-cluster, --socket with --nodes 2,
#    --route random without --seed, --redis-cluster 2, --redis-cluster without its tokens.
# $KVBENCH (default build/bin/kvbench); the daemons are the kvpoold beside it (--daemon
# names one daemon: not with --nodes).
set -eu
cd "$(dirname "$0")/.."

kvbench=${KVBENCH:-build/bin/kvbench}
for t in jq redis-server redis-cli; do
	command -v $t >/dev/null || { echo "$t is not installed (tools/deps.sh --tests)"; exit 77; }
done
dir=$(mktemp -d)
tmp=$(mktemp -d /var/tmp/kvpool-test-fleet.XXXXXX)
trap 'rm -rf "$dir" "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# 47 conversations of 4 turns on 4 system prompts, round the conversations: round robin over
# two nodes sends a conversation's turns to both in turn, session routing keeps them on one.
bench/conversations.sh 4 47 4 4 >"$dir/trace.jsonl"
replay() { TMPDIR=$tmp "$kvbench" replay "$dir/trace.jsonl" --json \
	--pool-tokens 8192 "$@"; }

replay >"$dir/one.json" || fail "--nodes 1"
jq -e '.nodes == 1 and .route == "round_robin" and .remote_timeouts == 0 and
       (.per_node | length) == 1 and .per_node[0].hit_rate == .hit_rate and
       .per_node[0].hit_rate_pool == .hit_rate_pool and .per_node[0].hit_rate_remote == 0 and
       .errors == 0' "$dir/one.json" >/dev/null || fail "one node: $(cat "$dir/one.json")"

replay --nodes 2 >"$dir/rr.json" || fail "--nodes 2 without a cluster tier"
# At the trace's pace (a conversation's next turn 470 ms later), not as fast as it goes: a
# machine's sends must be back before another machine is asked for them, as between turns.
replay --nodes 2 --redis-cluster 3 --tier-remote-tokens 1000000 --tier-remote-timeout-ms 200 \
	--speed 1 >"$dir/rr-cluster.json" || fail "--nodes 2 --redis-cluster 3"
replay --nodes 2 --route session >"$dir/session.json" || fail "--route session"
replay --nodes 2 --route random --seed 7 >"$dir/random.json" || fail "--route random"
replay --nodes 2 --route random --seed 7 >"$dir/random2.json" || fail "--route random, again"
cat "$dir"/rr.json "$dir"/rr-cluster.json "$dir"/session.json "$dir"/random.json
jq -e '.nodes == 2 and (.per_node | length) == 2 and .hit_rate_remote == 0 and .errors == 0 and
       .lru_hit_rate >= .hit_rate - 0.01' "$dir/rr.json" >/dev/null || fail "two nodes: the row"
jq -e --slurpfile rr "$dir/rr.json" '.nodes == 2 and .redis_cluster == 3 and
       .redis_key_bytes > 64 + 16 * 16 and .hit_rate_remote > 0 and .remote_bytes_out > 0 and
       .remote_bytes_in > 0 and .hit_rate > $rr[0].hit_rate + 0.05 and .errors == 0 and
       .hit_rate >= 0.95 * .lru_hit_rate and
       .hit_rate <= .ceiling and
       ([.per_node[].hit_rate_remote] | all(. > 0)) and
       ([.per_node[] | (.hit_rate_pool + .hit_rate_remote - .hit_rate) | fabs] | all(. < 0.0002))' \
	"$dir/rr-cluster.json" >/dev/null || fail "two nodes on a cluster: the cluster's hits"
jq -e --slurpfile rr "$dir/rr.json" '.route == "session" and .hit_rate > $rr[0].hit_rate and
       .errors == 0' "$dir/session.json" >/dev/null ||
	fail "session routing does not hit more than round robin"
jq -e --slurpfile r "$dir/random2.json" '.route == "random" and
       [.per_node[].hit_rate] == [$r[0].per_node[].hit_rate]' "$dir/random.json" >/dev/null ||
	fail "random routing: a seed does not make the same split"
[ -z "$(ls -A "$tmp")" ] || fail "left in \$TMPDIR: $(ls "$tmp")"
pgrep -f "redis-server 127.0.0.1" >/dev/null && pgrep -af redis-server | grep -q "$tmp" &&
	fail "a Redis of the run's outlived it"

for bad in "--tier-remote redis://127.0.0.1:1 --redis-cluster 3 --tier-remote-tokens 1" \
	   "--socket /nonexistent --nodes 2" "--route random" "--seed 1" \
	   "--redis-cluster 2 --tier-remote-tokens 1" "--redis-cluster 3" "--nodes 17" \
	   "--route nearest"; do
	set +e
	# shellcheck disable=SC2086 # the options are words
	"$kvbench" replay "$dir/trace.jsonl" $bad >/dev/null 2>"$dir/err"
	rc=$?
	set -e
	[ "$rc" = 2 ] && grep -q "^kvbench replay: " "$dir/err" || fail "'$bad': exit $rc, $(cat "$dir/err")"
done
echo "fleet: ok"
