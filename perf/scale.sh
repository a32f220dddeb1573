#!/bin/bash
# Scale on one machine: an 8-byte AllReduce (the tuner's default choice, or NCCL_ALGO when set)
# on N thread ranks, for each N: the whole run's wall time, the slowest rank's init time (and
# its bootstrap part: rendezvous at the root or roots) from the INFO "Init timings" line, the
# process's peak RSS (/usr/bin/time) and RSS per rank. Issue 26's table: what a communicator
# costs as ranks grow.
# Usage: perf/scale.sh [BUILD_DIR] [N ...]    (default 8 64 256 1024; about 30 s on 2 CPUs)
# SIZE=bytes sets the message (default 8); IDS=k creates the ranks with ncclCommInitRankScalable
# and k unique ids; REPEAT=r runs each point r times and reports the median of each column.
# Each point runs 5 iterations after the warm-up.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
ranks=("$@")
[ ${#ranks[@]} -gt 0 ] || ranks=(8 64 256 1024)
size=${SIZE:-8}
ids=${IDS:-1}
repeat=${REPEAT:-1}
perf="$build/perf/all_reduce_perf"
[ -x "$perf" ] || { echo "build first: $perf is missing"; exit 2; }
[ -x /usr/bin/time ] || { echo "needs /usr/bin/time (Debian: apt-get install time)"; exit 2; }
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else print v[int((NR + 1) / 2)] }'; }
printf "# %d unique id(s), %d B AllReduce, median of %d run(s)\n" "$ids" "$size" "$repeat"
printf "%8s %10s %10s %10s %12s %14s %s\n" ranks "wall (s)" "init (s)" "boot (s)" "peak RSS MB" "per rank KB" "errors"
for n in "${ranks[@]}"; do
  walls=() inits=() boots=() kibs=() wrong="?" failed=""
  for ((i = 0; i < repeat; ++i)); do
    out=$( { NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT /usr/bin/time -f "TIME %e %M" "$perf" --threads --ranks "$n" \
             --unique-ids "$ids" -b "$size" -e "$size" -n 5; } 2>&1 || true)
    kib=$(awk '/^TIME/ {print $3}' <<<"$out")
    if [ -z "$kib" ]; then failed=$(grep -v "NCCL INFO" <<<"$out" | tail -n 1); break; fi
    walls+=("$(awk '/^TIME/ {print $2}' <<<"$out")")
    kibs+=("$kib")
    # "Init timings: rank R nranks N total T s (bootstrap B, peer exchange P)": the slowest rank.
    inits+=("$(sed -n 's/.*Init timings: .* total \([0-9.]*\) s .*/\1/p' <<<"$out" | sort -g | tail -n 1)")
    boots+=("$(sed -n 's/.*Init timings: .*(bootstrap \([0-9.]*\),.*/\1/p' <<<"$out" | sort -g | tail -n 1)")
    wrong=$(awk '$1 == "'"$size"'" {print $9 + $13}' <<<"$out" | head -n 1)
  done
  if [ -n "$failed" ]; then
    printf "%8s %10s %10s %10s %12s %14s %s\n" "$n" - - - - - "failed: $failed"
    continue
  fi
  wall=$(printf "%s\n" "${walls[@]}" | median)
  init=$(printf "%s\n" "${inits[@]}" | median)
  boot=$(printf "%s\n" "${boots[@]}" | median)
  kib=$(printf "%s\n" "${kibs[@]}" | median)
  awk -v n="$n" -v wall="$wall" -v init="$init" -v boot="$boot" -v kib="$kib" -v wrong="${wrong:-?}" \
    'BEGIN { printf "%8s %10s %10s %10s %12.1f %14.0f %s\n", n, wall, init, boot, kib / 1024, kib / n, wrong }'
done
