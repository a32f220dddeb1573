#!/bin/bash
# The tuner against measurement: for 2, 4 and 8 ranks (processes) and 8 B, 64 KiB, 1 MiB and
# 64 MiB float-sum AllReduce (COLL=all_gather, reduce_scatter, broadcast, reduce or alltoall for those), every algorithm
# and protocol that serves it forced in turn (NCCL_ALGO,
# NCCL_PROTO; the tuner still picks the channels) and then the tuner's own choice, each with
# its measured time (median of REPEATS runs, default 3, of all_reduce_perf's out-of-place
# average), bus bandwidth and the time the model predicted (read from the library's INFO/COLL
# line for that call). Last, per rank count and size, whether the tuner's choice was the
# fastest measured. BRAID_RANKS_PER_NODE (passed on) makes Tree, Hier2D and the model see nodes.
# Usage: perf/tuner_bench.sh [BUILD_DIR] [RANKS...]   (a few minutes)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
[ $# -gt 0 ] && rankCounts=("$@") || rankCounts=(2 4 8)
repeats=${REPEATS:-3}
coll=${COLL:-all_reduce}
perf="$build/perf/${coll}_perf"
case $coll in
  all_reduce) name=ncclAllReduce factor=2 ;;
  all_gather) name=ncclAllGather factor=1 ;;
  reduce_scatter) name=ncclReduceScatter factor=1 ;;
  broadcast) name=ncclBroadcast factor=0 ;;
  reduce) name=ncclReduce factor=0 ;;
  alltoall) name=ncclAlltoAll factor=1 ;;
  *) echo "COLL=$coll: expected all_reduce, all_gather, reduce_scatter, broadcast, reduce or alltoall"; exit 2 ;;
esac
[ -x "$perf" ] || { echo "build first: $perf is missing"; exit 2; }
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}
sizes=(8 65536 1048576 67108864)
iters=(1000 200 20 2)
case $coll in
  all_reduce) variants=(Ring:LL Ring:Simple Tree:LL Tree:Simple Hier2D:LL Hier2D:Simple Direct:LL RecDoubling:LL RecDoubling:Simple HalvingDoubling:LL
                        HalvingDoubling:Simple Binomial:LL Binomial:Simple tuner) ;;
  all_gather | reduce_scatter) variants=(Ring:LL Ring:Simple HalvingDoubling:LL HalvingDoubling:Simple tuner)
                               sizes[0]=1024 ;;  # a float per rank on 8 ranks at least
  alltoall) variants=(Direct:Simple Pairwise:LL Pairwise:Simple Bruck:LL Bruck:Simple tuner)
            sizes[0]=1024 ;;
  *) variants=(Ring:LL Ring:Simple Binomial:LL Binomial:Simple tuner) ;;
esac

median() { sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }

# Environment forcing VARIANT ("tuner": nothing); AlltoAll is filtered by its own entries only.
prefix=""
[ "$coll" = alltoall ] && prefix="AlltoAll:"
force() { [ "$1" = tuner ] || echo NCCL_ALGO="$prefix${1%:*}" NCCL_PROTO="$prefix${1#*:}"; }
# predicted VARIANT RANKS SIZE -> "predicted_us choice" from one logged call (logging would
# slow the timed runs, so they run without it); empty when the library refuses the variant
predicted() {
  env $(force "$1") NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL "$perf" -b "$3" -e "$3" -n 1 -w 0 -c 0 --ranks "$2" 2>/dev/null |
    awk -v size="$3" -v name="$name" '$0 ~ (name ": " size " bytes") && !p {
        for (i = 1; i <= NF; ++i) { if ($i == "->") c = $(i+1); if ($i == "predicted") p = $(i+1) } }
      END { if (p != "") { sub(",", "", c); sub("/", ":", c); print p, c } }'
}
# measured VARIANT RANKS SIZE ITERS -> out-of-place average time (us) of one run
measured() {
  env $(force "$1") "$perf" -b "$3" -e "$3" -n "$4" -w 1 -c 0 --ranks "$2" 2>/dev/null | awk -v size="$3" '$1 == size { print $6 }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0) ? a / b : 0 }'; }

printf "%5s %10s  %-22s %12s %12s %8s %11s\n" ranks size variant "measured us" "model us" "ratio" "busbw GB/s"
declare -A best bestName choice tunerTime
for ranks in "${rankCounts[@]}"; do
  for i in "${!sizes[@]}"; do
    size=${sizes[$i]} n=${iters[$i]}
    for variant in "${variants[@]}"; do
      [ "$variant" = Direct:LL ] && [ "$size" -gt 16384 ] && continue
      pc=$(predicted "$variant" "$ranks" "$size")
      [ -z "$pc" ] && { printf "%5s %10s  %-22s %s\n" "$ranks" "$size" "$variant" "refused"; continue; }
      p=${pc% *} c=${pc#* }
      t=$(for ((r = 0; r < repeats; ++r)); do measured "$variant" "$ranks" "$size" "$n"; done | median)
      # nccl-tests' bus factor: f (n-1)/n, or 1 for Broadcast and Reduce (f = 0)
      bus=$(awk -v s="$size" -v t="$t" -v n="$ranks" -v f="$factor" \
        'BEGIN { b = (f > 0) ? f * (n - 1) / n : 1; printf "%.3f", (t > 0) ? s * b / t / 1000 : 0 }')
      label=$variant
      [ "$variant" = tuner ] && label="tuner ($c)"
      printf "%5s %10s  %-22s %12.2f %12.2f %8s %11s\n" "$ranks" "$size" "$label" "$t" "$p" "$(ratio "$t" "$p")" "$bus"
      key="$ranks $size"
      if [ "$variant" = tuner ]; then
        choice[$key]=$c tunerTime[$key]=$t
      elif [ -z "${best[$key]:-}" ] || awk -v a="$t" -v b="${best[$key]}" 'BEGIN { exit !((a < b) ? 1 : 0) }'; then
        best[$key]=$t bestName[$key]=$variant
      fi
    done
  done
done
echo
echo "tuner's choice against the fastest measured (forced runs); the last column: the tuner's run / the fastest"
for ranks in "${rankCounts[@]}"; do
  for size in "${sizes[@]}"; do
    key="$ranks $size"
    verdict=mismatch
    [ "${choice[$key]:-}" = "${bestName[$key]:-}" ] && verdict=match
    printf "%5s %10s  tuner %-22s fastest %-36s %-8s %s\n" "$ranks" "$size" "${choice[$key]:-?}" \
      "${bestName[$key]:-?} (${best[$key]:-?} us)" "$verdict" "$(ratio "${tunerTime[$key]:-0}" "${best[$key]:-0}")"
  done
done
