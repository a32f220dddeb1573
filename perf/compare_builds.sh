#!/bin/bash
# Two builds of Braid side by side (say, main before and after a change), host backend: each
# case runs alternately on build A and build B, REPEATS times (default 5), and the medians of
# the out-of-place time are printed with B/A. Runs take turns so that the machine's noise
# falls on both alike; still, quote ratios, and repeat a surprising one.
#
#   perf/compare_builds.sh BUILD_A BUILD_B [CASES_FILE]
#
# A case is a line "TOOL PROTO ALGO BYTES ITERS" (TOOL one of the *_perf tools; PROTO and ALGO
# go to NCCL_PROTO and NCCL_ALGO, "-" for the tuner's choice). RANKS (default 4) ranks, as
# processes, or threads with MODE=--threads. Without a cases file: the line protocols' copies
# and reductions and Direct's one-shot (the cases of the change that added this script).
# Both builds need the tools and the f32 and f64 sums (-Donly_funcs=sum:f32,sum:f64 will do).
# A build of an earlier commit: git worktree add /tmp/old REV, then meson setup there.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 BUILD_A BUILD_B [CASES_FILE]"; exit 2; }
a=$1 b=$2
cases=${3:-}
repeats=${REPEATS:-5}
ranks=${RANKS:-4}
mode=${MODE:-}
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}

default_cases="all_gather_perf LL ring 64 5000
all_gather_perf LL ring 65536 1000
all_gather_perf LL ring 1048573 100
all_gather_perf LL128 ring 65536 1000
all_gather_perf LL128 ring 1048576 200
broadcast_perf LL ring 65536 1000
all_reduce_perf LL ring 65536 1000
all_reduce_perf LL128 ring 65536 1000
all_reduce_perf LL allreduce:direct 8 5000
all_reduce_perf LL allreduce:direct 512 3000
all_reduce_perf LL allreduce:direct 4096 3000"

median() { sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }

# one BUILD TOOL PROTO ALGO BYTES ITERS -> the out-of-place time (us)
one() {
  local env=()
  [ "$3" != - ] && env+=("NCCL_PROTO=$3")
  [ "$4" != - ] && env+=("NCCL_ALGO=$4")
  env "${env[@]}" BRAID_BACKEND=host "$1/perf/$2" -b "$5" -e "$5" -n "$6" -w 50 -c 0 --ranks "$ranks" $mode |
    awk '$1 ~ /^[0-9]+$/ {print $6}'
}

for build in "$a" "$b"; do
  [ -d "$build/perf" ] || { echo "$build/perf is missing: build the perf tools there first"; exit 2; }
done
echo "# A = $a, B = $b; $ranks ranks ${mode:-as processes}; medians of $repeats, out-of-place time; load: $(cut -d' ' -f1-3 /proc/loadavg)"
printf "%-16s %-6s %-18s %9s  %10s  %10s  %5s\n" tool proto algo bytes "A (us)" "B (us)" "B/A"
while read -r tool proto algo bytes iters; do
  [ -z "$tool" ] && continue
  [ -x "$a/perf/$tool" ] && [ -x "$b/perf/$tool" ] || { echo "$tool: not built in both"; exit 2; }
  ta=() tb=()
  for _ in $(seq "$repeats"); do
    ta+=("$(one "$a" "$tool" "$proto" "$algo" "$bytes" "$iters")")
    tb+=("$(one "$b" "$tool" "$proto" "$algo" "$bytes" "$iters")")
  done
  ma=$(printf "%s\n" "${ta[@]}" | median)
  mb=$(printf "%s\n" "${tb[@]}" | median)
  printf "%-16s %-6s %-18s %9s  %10s  %10s  %5s\n" "$tool" "$proto" "$algo" "$bytes" "$ma" "$mb" \
    "$(awk -v x="$mb" -v y="$ma" 'BEGIN {printf "%.2f", x / y}')"
done < <(if [ -n "$cases" ]; then cat "$cases"; else echo "$default_cases"; fi)
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
