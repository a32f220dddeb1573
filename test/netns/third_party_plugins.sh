#!/bin/bash
# Braid with the third-party net plugins NCCL users run, between network namespaces: a manual
# check (the plugins are built by hand from their own sources, which CI cannot fetch), not a CI
# test. Each plugin given carries 4 ranks on 2 "hosts" (2 ranks a namespace: shared memory
# inside one, the plugin between them), then the same with every pair on the plugin
# (NCCL_SHM_DISABLE=1 NCCL_P2P_DISABLE=1):
#   - REPEATS jobs (20 unless set) of test/plugins/net_driver, each one communicator running
#     ITERATIONS (20) randomized counts (drawn from SEED, printed: a failure can be replayed),
#     each count an AllReduce, AllGather, Broadcast and ring Send/Recv of floats and a Scatter
#     and ring Send/Recv of bytes (uint8), every element checked, destroyed right after the
#     last one; every job's counts include 4099 (a uint8 Scatter of 4099 bytes a rank);
#   - the perf tools with -c 1 (AllReduce, AllGather, Send/Recv, AlltoAll, 8 B to 4 MiB).
# A job passes when every rank printed "done" and exited 0, and the log of the first one names
# the plugin. Prints "PLUGIN MODE: P of N jobs passed" per set, the failures' rank outputs,
# and keeps them in KEEP (a folder, made when needed; default /tmp/third_party_plugins.PID).
#
#   flock /tmp/netns.lock bash test/netns/third_party_plugins.sh BUILD_DIR
# with, for each plugin to run (either or both):
#   FASTSOCKET_PLUGIN=/path/libnccl-net-fastsocket.so   Google's nccl-fastsocket ("FastSocket",
#       net v6, host memory; built from net_fastsocket.cc and utilities.cc against NCCL's
#       nccl_net.h)
#   OFI_PLUGIN=/path/libnccl-net-ofi.so   AWS's aws-ofi-nccl ("Libfabric"), configured
#       --with-cuda=... --enable-cudart-dynamic; run with libfabric's tcp;ofi_rxm provider and
#       its send/recv protocol (FI_PROVIDER="tcp;ofi_rxm" OFI_NCCL_PROTOCOL=SENDRECV). On a
#       machine without a GPU its CUDA calls are answered by test/netns/cudart_host_shim.c,
#       built here into a libcudart.so it finds first (host memory only).
# Exits 77 with the reason when no plugin is given or a given one is missing, or namespaces
# cannot be made; 1 when a job failed.
#
# FastSocket's flow placement (its default) makes each connection in up to 1000 tries a socket
# where the machine has under 4 CPUs, and completes it inside the sender's first isend, on the
# proxy thread: that proxy moves nothing for a second or more. A receiver then waiting on that
# sender, which has gone on into the next collective, was told "... they wait for each other"
# by Braid's watchdog (1 of 20 'mixed' jobs on a 2-core VM); the watchdog now asks whether the
# sender still owes it data and keeps waiting. NCCL_FLOW_PLACEMENT_ENABLE=0 (exported before
# the script) connects at once (2 s a job, was 5).
set -u
build=$(cd "${1:?usage: third_party_plugins.sh BUILD_DIR}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
repeats=${REPEATS:-20}
iterations=${ITERATIONS:-20}
seed=${SEED:-$(date +%s)}
driver="$build/test/plugins/net_driver"
perf="$build/perf"

skip() { echo "SKIP: $*"; exit 77; }
fastsocket=${FASTSOCKET_PLUGIN:-}
ofi=${OFI_PLUGIN:-}
[ -n "$fastsocket$ofi" ] || skip "no plugin given (set FASTSOCKET_PLUGIN and/or OFI_PLUGIN to the built libraries)"
for lib in $fastsocket $ofi; do [ -f "$lib" ] || skip "$lib does not exist (build the plugin first)"; done
[ -x "$driver" ] || skip "$driver was not built"

. "$here/netns_lib.sh"
out=$(mktemp -d)
keep=${KEEP:-/tmp/third_party_plugins.$$}
trap 'netns_cleanup; rm -rf "$out"' EXIT
trap 'exit 130' INT TERM
netns_setup 2 >"$out/setup" 2>&1
case $? in
  0) ;;
  77) skip "$(cat "$out/setup")" ;;
  *) echo "netns setup failed: $(cat "$out/setup")"; exit 1 ;;
esac
port=$(( 10000 + $$ % 20000 ))

# The host-only libcudart.so aws-ofi-nccl loads (see above).
if [ -n "$ofi" ]; then
  cc -O2 -fPIC -shared -o "$out/libcudart.so" "$here/cudart_host_shim.c" || { echo "cannot build the CUDA shim"; exit 1; }
fi

# counts K: ITERATIONS counts of elements, log-uniform over 1 .. 2^20, one of them 4099 (job K's draw).
counts() {
  awk -v seed=$((seed + $1)) -v n="$iterations" 'BEGIN {
    srand(seed); at = int(rand() * n)
    for (i = 0; i < n; ++i) printf "%d ", (i == at) ? 4099 : int(exp(rand() * log(1048576))) + 1
  }'
}

failures=0
# job_passed: every rank said done and exited 0.
job_passed() {
  local r
  for r in 0 1 2 3; do
    [ "$(cat "$out/$r.status")" = 0 ] && grep -q "^rank $r: done" "$out/$r" || return 1
  done
}

# keep_failure NAME: the ranks' outputs into KEEP/NAME, their tails on stdout.
keep_failure() {
  local r
  mkdir -p "$keep/$1"
  for r in 0 1 2 3; do
    cp "$out/$r" "$keep/$1/rank$r"
    echo "--- $1: rank $r (exit status $(cat "$out/$r.status")):"
    grep -v '^$' "$out/$r" | tail -8
  done
}

# run_plugin NAME ENV: the driver jobs and the perf tools over one plugin, in both modes.
run_plugin() {
  local name=$1 env=$2 mode extra k passed first tool
  for mode in mixed network-only; do
    extra=""
    [ $mode = network-only ] && extra="NCCL_SHM_DISABLE=1 NCCL_P2P_DISABLE=1"
    passed=0
    for k in $(seq 1 "$repeats"); do
      first=""
      [ "$k" = 1 ] && first="NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET"
      local list
      list=$(counts "$k")
      local start=$SECONDS
      run_job 4 2 300 "$env $extra $first" -- "$driver" 4 rank @RANK@ $list
      if job_passed && { [ "$k" != 1 ] || grep -q "Using net plugin $name" "$out/0"; }; then
        passed=$((passed + 1))
        echo "  $name $mode job $k: passed in $((SECONDS - start)) s"
      else
        echo "FAILED: $name $mode job $k (seed $((seed + k)), counts $list) after $((SECONDS - start)) s"
        keep_failure "$name-$mode-$k"
      fi
    done
    echo "$name $mode: $passed of $repeats jobs passed (20 randomized counts each, seed $seed + job)"
    [ "$passed" = "$repeats" ] || failures=$((failures + repeats - passed))
    for tool in all_reduce all_gather sendrecv alltoall; do
      local start=$SECONDS
      run_job 4 2 300 "$env $extra" -- "$perf/${tool}_perf" -b 8 -e 4M -f 8 -n 2 -w 1 -c 1
      if grep -q "Out of bounds values : 0 OK" "$out/0" && job_statuses_zero; then
        echo "ok: $name $mode ${tool}_perf -b 8 -e 4M -c 1 ($((SECONDS - start)) s)"
      else
        echo "FAILED: $name $mode ${tool}_perf"
        keep_failure "$name-$mode-$tool"
        failures=$((failures + 1))
      fi
    done
  done
}

job_statuses_zero() { [ "$(cat "$out"/[0-3].status | sort -u)" = 0 ]; }

echo "seed $seed, $repeats jobs of $iterations counts per plugin and mode"
if [ -n "$fastsocket" ]; then
  run_plugin FastSocket "NCCL_NET_PLUGIN=$fastsocket NCCL_NET=FastSocket"
fi
if [ -n "$ofi" ]; then
  run_plugin Libfabric "NCCL_NET_PLUGIN=$ofi NCCL_NET=Libfabric LD_LIBRARY_PATH=$out FI_PROVIDER=tcp;ofi_rxm OFI_NCCL_PROTOCOL=SENDRECV"
fi
echo "third-party plugins: $failures failure(s)"
[ "$failures" = 0 ]
