#!/bin/bash
# Braid's socket transport beside plain TCP between the same two network namespaces, in one run:
#   64 MiB: all_reduce_perf and sendrecv_perf busbw (2 ranks, one per namespace) vs a one-way
#           TCP stream of 64 MiB rounds (perf/tcp_stream.c), and vs a TCP exchange (both ways at
#           once, as the 2-rank collectives send; in 8 MiB rounds, since Linux's TCP collapses
#           when two 32+ MiB flows cross on these machines);
#   8 B:    sendrecv_perf and all_reduce_perf time vs half a TCP ping-pong round trip.
# Each figure is the median of REPEATS (default 5) runs, Braid and TCP alternating, with the
# ratio Braid / TCP. Needs root (namespaces: test/netns/netns_lib.sh) and a built BUILD_DIR.
# Usage: perf/net_compare.sh [BUILD_DIR]
set -uo pipefail
cd "$(dirname "$0")/.."
build=$(cd "${1:-build}" && pwd)
repeats=${REPEATS:-5}
. test/netns/netns_lib.sh
work=$(mktemp -d)
trap 'netns_cleanup; rm -rf "$work"' EXIT
netns_setup 2 >"$work/setup" 2>&1 || { echo "cannot make namespaces: $(cat "$work/setup")"; exit 2; }
cc -O2 perf/tcp_stream.c -o "$work/tcp_stream" -lpthread || exit 2
port=$(( 30000 + $$ % 20000 ))

median() { sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }

# tcp MODE BYTES ITERS -> GB/s (stream) or one-way us (pingpong)
tcp() {
  port=$((port + 1))
  ip netns exec "${NETNS_TAG}n1" "$work/tcp_stream" serve $port &
  local server=$!
  ip netns exec "${NETNS_TAG}n0" "$work/tcp_stream" "$1" 198.18.0.2 $port "$2" "$3" |
    awk '/^stream/ {print $(NF-1)} /^exchange/ {print $(NF-3)} /^pingpong/ {print $(NF-1)}'
  wait $server
}

# braid TOOL BYTES ITERS FIELD -> rank 0's out-of-place time (FIELD 6, us) or busbw (FIELD 8, GB/s)
braid() {
  port=$((port + 1))
  local pids=()
  for r in 0 1; do
    ip netns exec "${NETNS_TAG}n$r" env $(netns_env $r) NCCL_COMM_ID=198.18.0.1:$port RANK=$r WORLD_SIZE=2 \
      "$build/perf/${1}_perf" -b "$2" -e "$2" -n "$3" -w 5 -c 0 >"$work/rank$r" 2>&1 &
    pids+=($!)
  done
  wait "${pids[@]}"
  awk -v f="$4" '$1 ~ /^[0-9]+$/ {print $f}' "$work/rank0"
}

row() {  # NAME UNIT BRAID_CMD TCP_CMD
  local b=() t=()
  for i in $(seq "$repeats"); do
    b+=("$($3)")
    t+=("$($4)")
  done
  local bm tm
  bm=$(printf '%s\n' "${b[@]}" | median)
  tm=$(printf '%s\n' "${t[@]}" | median)
  printf '%-34s %10s %10s %8s %s\n' "$1" "$bm" "$tm" "$(awk -v a="$bm" -v b="$tm" 'BEGIN {printf "%.2f", (b > 0 ? a / b : 0)}')" "$2"
}

echo "# socket transport vs TCP between two namespaces (veth + bridge), medians of $repeats"
printf '%-34s %10s %10s %8s %s\n' "measure" "braid" "tcp" "ratio" "unit"
row "all_reduce 64 MiB busbw / stream" "GB/s" "braid all_reduce 64M 10 8" "tcp stream 67108864 10"
row "sendrecv 64 MiB busbw / stream" "GB/s" "braid sendrecv 64M 10 8" "tcp stream 67108864 10"
row "all_reduce 64 MiB busbw / exchange" "GB/s" "braid all_reduce 64M 10 8" "tcp exchange 8388608 40"
row "sendrecv 64 MiB busbw / exchange" "GB/s" "braid sendrecv 64M 10 8" "tcp exchange 8388608 40"
row "sendrecv 8 B time / one way" "us" "braid sendrecv 8 2000 6" "tcp pingpong 8 2000"
row "all_reduce 8 B time / one way" "us" "braid all_reduce 8 2000 6" "tcp pingpong 8 2000"
