#!/bin/bash
# put_perf over the two carriers of one-sided operations between hosts, between the same network
# namespaces, in one run: 2 ranks, one in each of 2 namespaces (veth + bridge), each putting to
# the other and waiting for its signal, over
#   tcp:    the one-sided TCP links (transport/net/one_sided_links.h: no net plugin loaded);
#   plugin: the communicator's net plugin, test/plugins/net_loopback.c (NCCL_NET_PLUGIN=BUILD_DIR/
#           test/plugins/libnccl-net-loopback.so: transport/net/plugin/one_sided_plugin.h).
# Each figure is the median of REPEATS (default 3) runs, tcp and plugin alternating: rank 0's
# out-of-place time (us) and bus bandwidth (GB/s) per size, from 8 B to MAX (default 16M) by 8x.
# Needs root (namespaces: test/netns/netns_lib.sh; run under flock /tmp/netns.lock where others
# make namespaces too) and a built BUILD_DIR (a release build for figures worth keeping).
# Usage: perf/put_carrier_compare.sh [BUILD_DIR]
set -uo pipefail
cd "$(dirname "$0")/.."
build=$(cd "${1:-build}" && pwd)
repeats=${REPEATS:-3}
max=${MAX:-16M}
plugin="$build/test/plugins/libnccl-net-loopback.so"
[ -f "$plugin" ] || { echo "$plugin was not built"; exit 2; }
[ -x "$build/perf/put_perf" ] || { echo "$build/perf/put_perf was not built"; exit 2; }
. test/netns/netns_lib.sh
work=$(mktemp -d)
trap 'netns_cleanup; rm -rf "$work"' EXIT
netns_setup 2 >"$work/setup" 2>&1 || { echo "cannot make namespaces: $(cat "$work/setup")"; exit 2; }
port=$(( 30000 + $$ % 20000 ))

median() { sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }

# table NAME ENV...: one put_perf run, rank r in namespace r; rank 0's output in $work/NAME.$port,
# its rows "size time busbw" in $work/NAME.rows.$port. Fails when a rank failed or the carrier
# is not the one named (the log says which).
table() {
  local name=$1
  shift
  port=$((port + 1))
  local pids=() r bad=0
  for r in 0 1; do
    ip netns exec "${NETNS_TAG}n$r" env $(netns_env $r) NCCL_COMM_ID=198.18.0.1:$port RANK=$r WORLD_SIZE=2 \
      BRAID_BOOTSTRAP_TIMEOUT=30 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=NET "$@" timeout 300 "$build/perf/put_perf" \
      -b 8 -e "$max" -f 8 -n 20 -w 5 -c 1 >"$work/$name.$port.$r" 2>&1 &
    pids+=($!)
  done
  for r in 0 1; do wait "${pids[$r]}" || bad=1; done
  local out="$work/$name.$port.0"
  grep -q "Out of bounds values : 0 OK" "$out" || bad=1
  if grep -q "reaches its linked peers through net plugin" "$out"; then
    [ "$name" = plugin ] || bad=1
  else
    [ "$name" = tcp ] || bad=1
  fi
  if [ $bad = 1 ]; then
    echo "the $name run failed; rank 0 said:"
    cat "$out"
    return 1
  fi
  awk '$1 ~ /^[0-9]+$/ {print $1, $6, $8}' "$out" >"$work/$name.rows.$port"
}

load() { cut -d' ' -f1-3 /proc/loadavg; }
before=$(load)
for i in $(seq "$repeats"); do
  table tcp NCCL_NET_PLUGIN=none || exit 1
  table plugin NCCL_NET_PLUGIN="$plugin" || exit 1
done
echo "# put_perf, 2 ranks on 2 namespaces (veth + bridge), rank 0's out-of-place figures, medians of $repeats"
echo "# $(nproc) CPUs; load average $before before, $(load) after"
printf '%10s  %12s %10s  %12s %10s\n' "size (B)" "tcp us" "GB/s" "plugin us" "GB/s"
for size in $(awk '{print $1}' "$(ls "$work"/tcp.rows.* | head -1)"); do
  row=()
  for name in tcp plugin; do
    row+=("$(cat "$work"/$name.rows.* | awk -v s="$size" '$1 == s {print $2}' | median)")
    row+=("$(cat "$work"/$name.rows.* | awk -v s="$size" '$1 == s {print $3}' | median)")
  done
  printf '%10s  %12s %10s  %12s %10s\n' "$size" "${row[@]}"
done
