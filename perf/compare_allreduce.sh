#!/bin/bash
# Braid's all_reduce_perf (ranks as processes, then as threads) beside Open MPI's MPI_Allreduce
# (processes, shared memory), gloo's allreduce (processes, TCP over loopback: what PyTorch's gloo
# backend runs for CPU tensors) and a plain memcpy, float sum, in one run on this machine, for
# each rank count of RANKS (default "2 4 8"). Each measurement is repeated REPEATS times
# (default 5) and the median is printed, with the ratios to Open MPI and gloo. Needs Debian's
# openmpi-bin, libopenmpi-dev and libgloo-dev (a column whose tools are missing says so).
# Usage: perf/compare_allreduce.sh [BUILD_DIR]    (SIZES="8 67108864" RANKS=2 to narrow it)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
repeats=${REPEATS:-5}
read -r -a sizes <<< "${SIZES:-8 1024 65536 1048576 16777216 67108864}"
read -r -a rank_counts <<< "${RANKS:-2 4 8}"
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
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a != "-" && b != "-" && b > 0) printf "%.2f", a / b; else printf "-" }'; }
# iterations SIZE: enough calls for a stable average, few enough for large sizes.
iterations() { awk -v s="$1" 'BEGIN { n = int(2e8 / (s + 10000)); if (n > 20000) n = 20000; if (n < 10) n = 10; print n }'; }

gloo_bin=
if [ -f /usr/include/gloo/allreduce.h ] && c++ -O2 -std=c++17 perf/gloo_allreduce.cc -o "$work/gloo_allreduce" -lgloo -lpthread 2> "$work/gloo.log"; then
  gloo_bin=$work/gloo_allreduce
else
  echo "(gloo column empty: libgloo-dev missing or gloo_allreduce.cc did not build; apt-get install libgloo-dev)"
fi

# Each prints "time_us busbw_GBps" for NRANKS SIZE ITERS.
braid() {  # MODE NRANKS SIZE ITERS (out of place)
  local flags=(); [ "$1" = threads ] && flags=(--threads)
  "$build/perf/all_reduce_perf" -b "$3" -e "$3" -n "$4" -w 50 -c 0 --ranks "$2" "${flags[@]}" |
    awk '$1 ~ /^[0-9]+$/ {print $6, $8}'
}
mpi() {
  mpirun --allow-run-as-root --oversubscribe -np "$1" --mca pml ob1 --mca btl self,vader \
    "$work/mpi_allreduce" "$2" "$3" 2> /dev/null | awk '{print $2, $3}'
}
gloo() {
  [ -n "$gloo_bin" ] || { echo "- -"; return; }
  local store; store=$(mktemp -d "$work/store.XXXX")
  local r pids=()
  for ((r = 1; r < $1; ++r)); do "$gloo_bin" "$r" "$1" "$store" "$2" "$3" > /dev/null & pids+=($!); done
  "$gloo_bin" 0 "$1" "$store" "$2" "$3" | awk '{print $2, $3}'
  wait "${pids[@]}"
}
mcpy() { "$work/memcpy_bench" "$2" "$3" | awk '{print $2, $3}'; }

for nranks in "${rank_counts[@]}"; do
  echo
  echo "## $nranks ranks"
  printf "%-10s | %-19s | %-19s | %-19s | %-19s | %-8s | %-13s | %-13s | %-13s\n" "" "Braid, processes" "Braid, threads" \
    "Open MPI" "gloo" "memcpy" "procs/MPI" "threads/MPI" "procs/gloo"
  printf "%-10s | %8s %10s | %8s %10s | %8s %10s | %8s %10s | %8s | %5s %7s | %5s %7s | %5s %7s\n" size \
    us "busbw GB/s" us "busbw GB/s" us "busbw GB/s" us "busbw GB/s" "GB/s" time busbw time busbw time busbw
  for s in "${sizes[@]}"; do
    n=$(iterations "$s")
    declare -A t=() b=()
    for kind in procs threads mpi gloo mcpy; do
      results=()
      for ((r = 0; r < repeats; ++r)); do
        case $kind in
          procs | threads) results+=("$(braid "$kind" "$nranks" "$s" "$n")") ;;
          mpi) results+=("$(mpi "$nranks" "$s" "$n")") ;;
          gloo) results+=("$(gloo "$nranks" "$s" "$(( (n + 9) / 10 ))")") ;;  # gloo's TCP is slow: fewer calls
          mcpy) results+=("$(mcpy "$nranks" "$s" "$n")") ;;
        esac
      done
      if printf "%s\n" "${results[@]}" | grep -q '^-'; then t[$kind]=- b[$kind]=-; continue; fi
      t[$kind]=$(printf "%s\n" "${results[@]}" | awk '{print $1}' | median)
      b[$kind]=$(printf "%s\n" "${results[@]}" | awk '{print $2}' | median)
    done
    printf "%-10s | %8s %10s | %8s %10s | %8s %10s | %8s %10s | %8s | %5s %7s | %5s %7s | %5s %7s\n" "$s" \
      "${t[procs]}" "${b[procs]}" "${t[threads]}" "${b[threads]}" "${t[mpi]}" "${b[mpi]}" "${t[gloo]}" "${b[gloo]}" "${b[mcpy]}" \
      "$(ratio "${t[procs]}" "${t[mpi]}")" "$(ratio "${b[procs]}" "${b[mpi]}")" \
      "$(ratio "${t[threads]}" "${t[mpi]}")" "$(ratio "${b[threads]}" "${b[mpi]}")" \
      "$(ratio "${t[procs]}" "${t[gloo]}")" "$(ratio "${b[procs]}" "${b[gloo]}")"
  done
done
echo "(medians of $repeats runs; time ratios below 1 and busbw ratios above 1 favour Braid; load: $(cut -d' ' -f1-3 /proc/loadavg))"
