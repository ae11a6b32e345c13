#!/usr/bin/env bash
# first-page-bound.sh: the least Redis CPU any design can spend on a
# reader's first timeline page when the reader has no inbox yet — one read
# of each pushed followee's outbox — measured on a private redis-server.
#
#   PORT=6393 bash feed/testdata/first-page-bound.sh
#
# Seeds 50 sorted sets (the benchmark reader's 50 pushed followees) of 40
# posts each (member: a 19-digit post id, score: its time in ms), then reads
# them with redis-benchmark (-c 16 -P 50, so Redis stays busy and does not
# count waking up) three ways: a 20-post head with scores, without scores,
# and the head entry alone. Prints the server's main-thread CPU per call
# (INFO cpu around the run, divided by INFO commandstats' calls). Give it a
# server nothing else uses: other clients' commands count too. Its keys
# (fpb:<12 digits>, the names redis-benchmark's -r draws) are deleted at
# the end.
set -euo pipefail
PORT=${PORT:-6393}
N=${N:-500000}
cli() { redis-cli -p "$PORT" "$@"; }

cpu() { # main-thread CPU seconds so far
	cli info cpu | tr -d '\r' | awk -F: '/^used_cpu_(sys|user)_main_thread:/ { s += $2 } END { printf "%.6f", s }'
}
calls() { # ZREVRANGE calls so far
	cli info commandstats | tr -d '\r' | sed -n 's/^cmdstat_zrevrange:calls=\([0-9]*\),.*/\1/p'
}

for k in $(seq 0 49); do
	args=()
	for p in $(seq 1 40); do
		args+=("$((1700000000000 + k * 1000 + p))" "$((7300000000000000000 + k * 1000 + p))")
	done
	cli zadd "$(printf fpb:%012d "$k")" "${args[@]}" >/dev/null
done
trap 'for k in $(seq 0 49); do cli del "$(printf fpb:%012d "$k")" >/dev/null; done' EXIT

for variant in "0 19 WITHSCORES" "0 19" "0 0 WITHSCORES"; do
	cli config resetstat >/dev/null
	c0=$(cpu)
	# shellcheck disable=SC2086 # the variant is the command's arguments
	redis-benchmark -p "$PORT" -n "$N" -c 16 -P 50 -r 50 -q ZREVRANGE fpb:__rand_int__ $variant >/dev/null
	c1=$(cpu)
	n=$(calls)
	awk -v a="$c0" -v b="$c1" -v n="$n" -v v="$variant" \
		'BEGIN { printf "ZREVRANGE %-18s %7d calls  %.2f µs/call\n", v, n, (b - a) * 1e6 / n }'
done
