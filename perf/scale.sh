#!/bin/bash
# Scale on one machine: an 8-byte AllReduce (the tuner's default choice, or NCCL_ALGO when set)
# on N thread ranks, for each N, with the whole run's wall time and the process's peak RSS
# (/usr/bin/time), and RSS per rank. Issue 26's table: what a communicator costs as ranks grow.
# Usage: perf/scale.sh [BUILD_DIR] [N ...]    (default 8 64 256 1024; about 20 s on 2 CPUs)
# SIZE=bytes sets the message (default 8); each point runs 5 iterations after the warm-up.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
ranks=("$@")
[ ${#ranks[@]} -gt 0 ] || ranks=(8 64 256 1024)
size=${SIZE:-8}
perf="$build/perf/all_reduce_perf"
[ -x "$perf" ] || { echo "build first: $perf is missing"; exit 2; }
[ -x /usr/bin/time ] || { echo "needs /usr/bin/time (Debian: apt-get install time)"; exit 2; }
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}
printf "%8s %10s %12s %14s %s\n" ranks "wall (s)" "peak RSS MB" "per rank KB" "errors"
for n in "${ranks[@]}"; do
  out=$( { /usr/bin/time -f "TIME %e %M" "$perf" --threads --ranks "$n" -b "$size" -e "$size" -n 5; } 2>&1 || true)
  wall=$(awk '/^TIME/ {print $2}' <<<"$out")
  kib=$(awk '/^TIME/ {print $3}' <<<"$out")
  wrong=$(awk '$1 == "'"$size"'" {print $9 + $13}' <<<"$out" | head -n 1)
  if [ -z "$kib" ]; then
    printf "%8s %10s %12s %14s %s\n" "$n" - - - "failed: $(tail -n 1 <<<"$out")"
    continue
  fi
  awk -v n="$n" -v wall="$wall" -v kib="$kib" -v wrong="${wrong:-?}" \
    'BEGIN { printf "%8s %10s %12.1f %14.0f %s\n", n, wall, kib / 1024, kib / n, wrong }' 
done
