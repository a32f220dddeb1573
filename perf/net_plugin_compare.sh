#!/bin/bash
# A net plugin beside Braid's own socket transport, between the same network namespaces, in one
# run: 64 MiB all_reduce_perf busbw, 4 ranks on 2 namespaces (2 per namespace: shared memory
# inside one, the network between them), over
#   socket: Braid's socket transport (no NCCL_NET_PLUGIN, NCCL_NET=Socket);
#   plugin: test/plugins/net_loopback.c (NCCL_NET_PLUGIN=BUILD_DIR/test/plugins/
#           libnccl-net-loopback.so: one TCP connection per pair of ranks, progressed by the
#           plugin's test calls on Braid's proxy thread).
# Each figure is the median of REPEATS (default 5) runs, socket and plugin alternating, with the
# ratio plugin / socket; SIZES (default 64M) lists the all_reduce sizes (e.g. "16K 64M": a small
# one shows what a step's messages cost). Needs root (namespaces: test/netns/netns_lib.sh) and a built BUILD_DIR
# (a release build for figures worth keeping).
# Usage: perf/net_plugin_compare.sh [BUILD_DIR]
set -uo pipefail
cd "$(dirname "$0")/.."
build=$(cd "${1:-build}" && pwd)
repeats=${REPEATS:-5}
sizes=${SIZES:-64M}
plugin="$build/test/plugins/libnccl-net-loopback.so"
[ -f "$plugin" ] || { echo "$plugin was not built"; exit 2; }
[ -x "$build/perf/all_reduce_perf" ] || { echo "$build/perf/all_reduce_perf was not built"; exit 2; }
. test/netns/netns_lib.sh
work=$(mktemp -d)
trap 'netns_cleanup; rm -rf "$work"' EXIT
netns_setup 2 >"$work/setup" 2>&1 || { echo "cannot make namespaces: $(cat "$work/setup")"; exit 2; }
port=$(( 30000 + $$ % 20000 ))

median() { sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }

# busbw BYTES ENV... -> rank 0's out-of-place busbw (GB/s) of an all_reduce of BYTES, 4 ranks,
# rank r in namespace r / 2; "failed" (rank 0's output kept in $work) when a rank failed or
# printed none.
busbw() {
  local bytes=$1
  shift
  port=$((port + 1))
  local pids=() r k bad=0
  for r in 0 1 2 3; do
    k=$((r / 2))
    ip netns exec "${NETNS_TAG}n$k" env $(netns_env $k) NCCL_COMM_ID=198.18.0.1:$port RANK=$r WORLD_SIZE=4 \
      BRAID_BOOTSTRAP_TIMEOUT=30 "$@" timeout 300 "$build/perf/all_reduce_perf" -b "$bytes" -e "$bytes" -n 10 -w 5 -c 0 \
      >"$work/rank$r" 2>&1 &
    pids+=($!)
  done
  for r in 0 1 2 3; do wait "${pids[$r]}" || bad=1; done
  local v
  v=$(awk '$1 ~ /^[0-9]+$/ {print $8}' "$work/rank0")
  if [ "$bad" = 1 ] || [ -z "$v" ]; then
    cp "$work/rank0" "$work/failed.$port"
    echo failed
  else
    echo "$v"
  fi
}

# Each set-up carries what it should: the log of a short run names the transport.
for net in Socket Plugin; do
  if [ $net = Socket ]; then set -- NCCL_NET=Socket; else set -- NCCL_NET_PLUGIN="$plugin"; fi
  busbw 1M NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=NET "$@" >/dev/null
  if ! grep -q "via NET/$net" "$work/rank0" || grep -v "via NET/$net" "$work/rank0" | grep -q "via NET/"; then
    echo "the $net run did not go (only) via NET/$net; rank 0 said:"
    cat "$work/rank0"
    exit 1
  fi
done

load() { cut -d' ' -f1-3 /proc/loadavg; }
before=$(load)
report=()
for size in $sizes; do
  socket=()
  plug=()
  for i in $(seq "$repeats"); do
    socket+=("$(busbw "$size" NCCL_NET=Socket)")
    plug+=("$(busbw "$size" NCCL_NET_PLUGIN="$plugin")")
  done
  if printf '%s\n' "${socket[@]}" "${plug[@]}" | grep -q failed; then
    echo "a run failed; rank 0 said:"
    cat "$work"/failed.*
    exit 1
  fi
  sm=$(printf '%s\n' "${socket[@]}" | median)
  pm=$(printf '%s\n' "${plug[@]}" | median)
  report+=("$(printf '%-6s %-8s %10s   %s' "$size" "socket" "$sm" "${socket[*]}")")
  report+=("$(printf '%-6s %-8s %10s   %s' "$size" "plugin" "$pm" "${plug[*]}")")
  report+=("$(printf '%-6s ratio plugin / socket: %s' "$size" "$(awk -v a="$pm" -v b="$sm" 'BEGIN {printf "%.2f", (b > 0 ? a / b : 0)}')")")
done

echo "# all_reduce busbw, 4 ranks on 2 namespaces (veth + bridge), medians of $repeats"
echo "# $(nproc) CPUs; load average $before before, $(load) after"
printf '%-6s %-8s %10s   %s\n' "size" "net" "GB/s" "runs"
printf '%s\n' "${report[@]}"
