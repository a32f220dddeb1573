#!/bin/bash
# Memory a communicator costs each rank after a warm-up of every collective at 8 B and SIZE
# (perf/comm_memory.cc: N thread ranks; the growth of the process's RSS over the touched user
# buffers, per rank), for each N, and the largest FIFO total a rank reserved (INFO ALLOC).
# Usage: perf/memory.sh [BUILD_DIR] [N ...]     (default 8 64 256 1024)
# SIZE (default 4M) is each rank's buffer; a point whose buffers (2 x SIZE x N) would not fit in
# half the machine's memory is skipped and says so.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
ranks=("$@")
[ ${#ranks[@]} -gt 0 ] || ranks=(8 64 256 1024)
size=${SIZE:-4M}
tool="$build/perf/comm_memory"
[ -x "$tool" ] || { echo "build first: $tool is missing"; exit 2; }
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}
bytes=$(numfmt --from=iec "$size")
memKiB=$(awk '/^MemTotal/ {print $2}' /proc/meminfo)
printf "# SIZE %s per rank buffer; every collective at 8 B and SIZE; KiB per rank\n" "$size"
printf "%8s %12s %12s %16s %10s %s\n" ranks "after init" "after warm" "FIFO reserved" "wall (s)" "errors"
for n in "${ranks[@]}"; do
  if (( 2 * bytes / 1024 * n > memKiB / 2 )); then
    printf "%8s %12s %12s %16s %10s %s\n" "$n" - - - - "skipped: buffers of $((2 * bytes * n >> 20)) MiB"
    continue
  fi
  start=$(date +%s.%N)
  out=$(NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=ALLOC "$tool" "$n" "$bytes" 2>&1 || true)
  wall=$(echo "$(date +%s.%N) - $start" | bc)
  line=$(grep '^ranks ' <<<"$out" || true)
  if [ -z "$line" ]; then
    printf "%8s %12s %12s %16s %10s %s\n" "$n" - - - - "failed: $(tail -n 1 <<<"$out")"
    continue
  fi
  # "rank R: E connection ends after ..., FIFO memory M MiB (...)": the largest M of any rank.
  fifo=$(sed -n 's/.*connection ends after .*, FIFO memory \([0-9.]*\) MiB.*/\1/p' <<<"$out" | sort -g | tail -n 1)
  awk -v n="$n" -v fifo="${fifo:-0}" -v wall="$wall" '{
      for (i = 1; i < NF; i += 2) v[$i] = $(i + 1)
      printf "%8s %12s %12s %16.0f %10.1f %s\n", n, v["init_per_rank_kib"], v["warm_per_rank_kib"], fifo * 1024, wall, v["wrong"]
    }' <<<"$line"
done
