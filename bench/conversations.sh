#!/usr/bin/env bash
# Writes a request trace in Mooncake's FAST'25 format (JSON Lines: timestamp ms,
# input_length, output_length, hash_ids of 512 tokens) for kvbench replay:
# CONVERSATIONS conversations of TURNS turns on SYSTEMS system prompts of 2
# blocks each. Turn t's prompt is its system prompt and the conversation's
# 2t blocks so far, the last block cut short by (c * 37) % 200 tokens; turns go
# round the conversations, so each comes back after all the others, 10 ms
# apart. Output OUTPUT tokens each.
# Usage: bench/conversations.sh SYSTEMS CONVERSATIONS TURNS [OUTPUT] > trace.jsonl
set -eu
[ $# -ge 3 ] || { echo "usage: $0 SYSTEMS CONVERSATIONS TURNS [OUTPUT]" >&2; exit 2; }
awk -v S="$1" -v C="$2" -v T="$3" -v O="${4:-8}" 'BEGIN {
	for (t = 1; t <= T; t++)
		for (c = 0; c < C; c++) {
			s = c % S
			ids = (1000 * s + 1) "," (1000 * s + 2)
			for (b = 1; b <= 2 * t; b++)
				ids = ids "," (100000 + c * 1000 + b)
			len = 512 * (2 + 2 * t) - (c * 37) % 200
			printf "{\"timestamp\": %d, \"input_length\": %d, \"output_length\": %d, \"hash_ids\": [%s]}\n", i++ * 10, len, O, ids
		}
}'
