#!/bin/bash
# Measures the host backend's cost-model constants on this machine (topology/tuner.cc,
# kHostCostTable) with all_reduce_perf, ranks as processes, each algorithm, protocol and
# channel count forced through NCCL_ALGO, NCCL_PROTO and NCCL_MIN/MAX_NCHANNELS. Every
# measurement is the median of REPEATS runs (default 3). Method:
# - base and per-step latency per protocol: a least-squares line through the 8-byte times of
#   Ring (2 steps), RecDoubling (1), HalvingDoubling (2) and, for LL, Direct (1) at 2 ranks;
# - the oversubscribed step (more ranks than CPUs): Ring at 2*CPUs ranks, (time - base) / steps;
# - channel bandwidth: Ring/Simple at 64 MiB, 2 ranks, 1 channel, as bus bandwidth;
#   LL's efficiency: Ring/LL's bandwidth at 64 KiB and 1 MiB (the mean, latency taken off)
#   against that channel bandwidth (LL's speed is its flag polling's, the same at every size);
# - the cache speedup: Ring/Simple's bandwidth at 64 KiB (in the caches) against the channel's;
# - the oversubscribed ring's CPU share per protocol: Ring at 2*CPUs ranks, 1 MiB, its bandwidth
#   against the channel's (x the protocol's efficiency) x the threads per CPU;
# - RecDoubling's and HalvingDoubling's bandwidth against the ring's at 16 MiB on 4 ranks, per
#   byte each moves (Ring and HalvingDoubling 3/2 of the vector, RecDoubling 2);
# - a second channel at 8 bytes and 64 MiB, to see oversubscription and the aggregate;
# - the network: the same Ring measurements with NCCL_SHM_DISABLE=1 NCCL_P2P_DISABLE=1
#   (the socket transport over loopback).
# Prints the fitted constants beside the table's current ones; copy them into tuner.cc.
# Usage: perf/calibrate_host.sh [BUILD_DIR]     (under a minute on 2 CPUs)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
repeats=${REPEATS:-3}
perf="$build/perf/all_reduce_perf"
[ -x "$perf" ] || { echo "build first: $perf is missing"; exit 2; }
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}
cpus=$(nproc)

median() { sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }

# measure ALGO PROTO CHANNELS RANKS SIZE ITERS [VAR=VALUE...] -> median out-of-place time (us)
measure() {
  local algo=$1 proto=$2 ch=$3 ranks=$4 size=$5 iters=$6
  shift 6
  for ((r = 0; r < repeats; ++r)); do
    env "$@" NCCL_ALGO="$algo" NCCL_PROTO="$proto" NCCL_MIN_NCHANNELS="$ch" NCCL_MAX_NCHANNELS="$ch" \
      "$perf" -b "$size" -e "$size" -n "$iters" -w 20 -c 0 --ranks "$ranks" | awk '$1 ~ /^[0-9]+$/ {print $6}'
  done | median
}
calc() { awk "BEGIN { printf \"%.3f\", ($1) }"; }

echo "# host cost-model calibration: $cpus CPUs, $(uname -m), medians of $repeats runs"
declare -A base hop over
for proto in LL Simple; do
  points=("2 $(measure Ring $proto 1 2 8 5000)" "1 $(measure RecDoubling $proto 1 2 8 5000)"
          "2 $(measure HalvingDoubling $proto 1 2 8 5000)")
  [ $proto = LL ] && points+=("1 $(measure Direct LL 1 2 8 5000)")
  fit=$(printf "%s\n" "${points[@]}" | awk '{n++; sx+=$1; sy+=$2; sxx+=$1*$1; sxy+=$1*$2}
        END {d = n*sxx - sx*sx; b = (n*sxy - sx*sy) / d; a = (sy - b*sx) / n; if (b < 0.01) b = 0.01; if (a < 0) a = 0; printf "%.3f %.3f", a, b}')
  base[$proto]=${fit% *}
  hop[$proto]=${fit#* }
  echo "$proto 8-byte points (steps time_us): ${points[*]}"
  n=$((2 * cpus)) steps=$((2 * (2 * cpus - 1)))
  t=$(measure Ring $proto 1 $n 8 1000)
  over[$proto]=$(calc "($t - ${base[$proto]}) / $steps")
  echo "$proto at $n ranks, Ring 8 B: $t us"
done
big=67108864 mid=65536
tbig=$(measure Ring Simple 1 2 $big 10)
tbig2=$(measure Ring Simple 2 2 $big 10)
tmidS=$(measure Ring Simple 1 2 $mid 500)
tmidL=$(measure Ring LL 1 2 $mid 500)
tmegS=$(measure Ring Simple 1 2 1048576 100)
tmegL=$(measure Ring LL 1 2 1048576 100)
# At 4 ranks Ring and HalvingDoubling move 3/2 of the vector, RecDoubling 2 of it.
t4ring=$(measure Ring Simple 1 4 16777216 5)
t4rd=$(measure RecDoubling Simple 1 4 16777216 5)
t4hd=$(measure HalvingDoubling Simple 1 4 16777216 5)
bw=$(calc "$big / $tbig / 1000")       # bus bytes = bytes at 2 ranks
bw2=$(calc "$big / $tbig2 / 1000")
# Bandwidth (GB/s) of SIZE bytes moved once in TIME us less LATENCY us.
speed() { calc "($1) / ($2 - ($3)) / 1000"; }
lat2L=$(calc "${base[LL]} + 2 * ${hop[LL]}")
lat2S=$(calc "${base[Simple]} + 2 * ${hop[Simple]}")
eff=$(calc "($(speed $mid "$tmidL" "$lat2L") + $(speed 1048576 "$tmegL" "$lat2L")) / 2 / $bw")
cached=$(calc "$(speed $mid "$tmidS" "$lat2S") / $bw")
# The ring at 2*CPUs ranks (2 threads per CPU) moves 2(n-1)/n of the vector in 2(n-1) steps.
n=$((2 * cpus))
tovL=$(measure Ring LL 1 $n 1048576 20)
tovS=$(measure Ring Simple 1 $n 1048576 20)
moved=$(calc "2 * ($n - 1) / $n")
shareL=$(calc "2 * $(speed "$moved * 1048576" "$tovL" "${base[LL]} + 2 * ($n - 1) * ${over[LL]}") / ($bw * $eff)")
shareS=$(calc "2 * $(speed "$moved * 1048576" "$tovS" "${base[Simple]} + 2 * ($n - 1) * ${over[Simple]}") / $bw")
t1=$(measure Ring Simple 1 2 8 5000)
t2=$(measure Ring Simple 2 2 8 5000)
netenv=(NCCL_SHM_DISABLE=1 NCCL_P2P_DISABLE=1)
netLL=$(measure Ring LL 1 2 8 2000 "${netenv[@]}")
netS=$(measure Ring Simple 1 2 8 2000 "${netenv[@]}")
netBig=$(measure Ring Simple 1 2 $big 5 "${netenv[@]}")
echo "Ring/Simple 64 MiB: $tbig us (1 channel), $tbig2 us (2 channels); 16 MiB on 4 ranks: Ring $t4ring us, RecDoubling $t4rd us, HalvingDoubling $t4hd us"
echo "Ring 64 KiB: Simple $tmidS us, LL $tmidL us; 1 MiB: Simple $tmegS us, LL $tmegL us; on $n ranks: Simple $tovS us, LL $tovL us"
echo "Ring/Simple 8 B: $t1 us (1 channel), $t2 us (2 channels); network 8 B: LL $netLL us, Simple $netS us; 64 MiB $netBig us"
echo
echo "fitted constants (table order LL, LL128, Simple; LL128 copies Simple):"
echo "  baseLatency      ${base[LL]}, ${base[Simple]}, ${base[Simple]}"
echo "  hopLatency       memory ${hop[LL]}, ${hop[Simple]}, ${hop[Simple]}; network $(calc "($netLL - ${base[LL]}) / 2"), $(calc "($netS - ${base[Simple]}) / 2"), $(calc "($netS - ${base[Simple]}) / 2")"
echo "  oversubscribedHop ${over[LL]}, ${over[Simple]}, ${over[Simple]}"
echo "  channelBandwidth memory $bw, network $(calc "$big / $netBig / 1000")"
echo "  aggregateBandwidth memory $(calc "$bw2 > $bw ? $bw2 : $bw") (two channels together), network as its channel"
echo "  ringCpuShare     $shareL, $shareS, $shareS"
echo "  protoEfficiency  LL $eff (and llReducingEfficiency)"
echo "  cachedSpeedup    $cached (at 64 KiB; 1 MiB is taken to leave the caches)"
echo "  per-byte speed against Ring (the model takes 1): RecDoubling $(calc "$t4ring / 1.5 / ($t4rd / 2)"), HalvingDoubling $(calc "$t4ring / $t4hd")"
