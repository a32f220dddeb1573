#!/bin/bash
# Braid's all_reduce_perf (2 ranks as processes, then as threads) beside Open MPI's
# MPI_Allreduce (2 processes, shared memory) and a plain memcpy, float sum, in one run on
# this machine. Each measurement is repeated REPEATS times (default 5) and the median is
# printed, with the ratios to Open MPI. Needs Debian's openmpi-bin and libopenmpi-dev.
# Usage: perf/compare_allreduce.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
repeats=${REPEATS:-5}
sizes=(8 1024 65536 1048576 16777216 67108864)
iters=(20000 10000 2000 300 40 10)
export NCCL_SOCKET_IFNAME=lo

for tool in mpicc mpirun; do
  command -v $tool >/dev/null || { echo "needs $tool: apt-get install openmpi-bin libopenmpi-dev"; exit 2; }
done
[ -x "$build/perf/all_reduce_perf" ] || { echo "build first: $build/perf/all_reduce_perf is missing"; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mpicc -O2 perf/mpi_allreduce.c -o "$work/mpi_allreduce"
cc -O2 perf/memcpy_bench.c -o "$work/memcpy_bench"

median() { sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }

# braid MODE SIZE ITERS -> "time busbw" (out of place)
braid() {
  local flags=(); [ "$1" = threads ] && flags=(--threads)
  "$build/perf/all_reduce_perf" -b "$2" -e "$2" -n "$3" -w 50 -c 0 --ranks 2 "${flags[@]}" |
    awk '$1 ~ /^[0-9]+$/ {print $6, $8}'
}
mpi() { mpirun --allow-run-as-root -np 2 --mca pml ob1 --mca btl self,vader "$work/mpi_allreduce" "$1" "$2" 2>/dev/null | awk '{print $2, $3}'; }
mcpy() { "$work/memcpy_bench" "$1" "$2" | awk '{print $2, $3}'; }

printf "%-10s | %-19s | %-19s | %-19s | %-8s | %-14s | %-14s\n" "" "Braid, processes" "Braid, threads" "Open MPI" "memcpy" "procs/MPI" "threads/MPI"
printf "%-10s | %8s %10s | %8s %10s | %8s %10s | %8s | %6s %7s | %6s %7s\n" size "us" "busbw GB/s" "us" "busbw GB/s" "us" "busbw GB/s" "GB/s" time busbw time busbw
for i in "${!sizes[@]}"; do
  s=${sizes[$i]} n=${iters[$i]}
  declare -A t=() b=()
  for kind in procs threads mpi mcpy; do
    results=()
    for ((r = 0; r < repeats; ++r)); do
      case $kind in
        procs) results+=("$(braid procs "$s" "$n")") ;;
        threads) results+=("$(braid threads "$s" "$n")") ;;
        mpi) results+=("$(mpi "$s" "$n")") ;;
        mcpy) results+=("$(mcpy "$s" "$n")") ;;
      esac
    done
    t[$kind]=$(printf "%s\n" "${results[@]}" | awk '{print $1}' | median)
    b[$kind]=$(printf "%s\n" "${results[@]}" | awk '{print $2}' | median)
  done
  ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else printf "-" }'; }
  printf "%-10s | %8.2f %10.3f | %8.2f %10.3f | %8.2f %10.3f | %8.3f | %6s %7s | %6s %7s\n" "$s" \
    "${t[procs]}" "${b[procs]}" "${t[threads]}" "${b[threads]}" "${t[mpi]}" "${b[mpi]}" "${b[mcpy]}" \
    "$(ratio "${t[procs]}" "${t[mpi]}")" "$(ratio "${b[procs]}" "${b[mpi]}")" \
    "$(ratio "${t[threads]}" "${t[mpi]}")" "$(ratio "${b[threads]}" "${b[mpi]}")"
done
echo "(medians of $repeats runs; time ratios below 1 and busbw ratios above 1 favour Braid)"
