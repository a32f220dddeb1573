#!/bin/bash
# Suite netns: ranks on separate "hosts" made of network namespaces, talking through the socket
# transport (and the verbs transport over its test double, and a net plugin), as jobs across
# machines do.
#
# A hub namespace holds a bridge; each host namespace is joined to it by a veth pair and gets a
# private address from 198.18.0.0/15 (RFC 2544's range for network tests), which exists only
# inside these namespaces. Every rank runs with NCCL_SOCKET_IFNAME set to its namespace's
# interface and NCCL_HOSTID set to its namespace (the namespaces share one kernel, so without it
# the ranks would see one host and use shared memory). Namespaces are removed on exit, whatever
# happened.
#
#   netns_test.sh BUILD_DIR
# needs BUILD_DIR/perf/*_perf, BUILD_DIR/test/rank_main and BUILD_DIR/test/plugins. Exits 77
# (meson: skipped) with the reason when namespaces cannot be made (not root, no ip, no
# permission).
set -u
build=$(cd "$1" && pwd)
perf="$build/perf"
rank_main="$build/test/rank_main"

skip() { echo "SKIP: $*"; exit 77; }
. "$(dirname "$0")/netns_lib.sh"
hosts=4
trap 'netns_cleanup; rm -rf "$out"' EXIT
trap 'exit 130' INT TERM
out=$(mktemp -d)
netns_setup $hosts >"$out/setup" 2>&1
case $? in
  0) ;;
  77) skip "$(cat "$out/setup")" ;;
  *) echo "netns setup failed: $(cat "$out/setup")"; exit 1 ;;
esac
rm "$out/setup"

failures=0
# Root ports below Linux's ephemeral range (32768 and up), where an earlier job's outgoing
# connection (or its TIME_WAIT) cannot hold the port: 10000-29999, a few dozen jobs per run.
port=$(( 10000 + $$ % 20000 ))
shm_before=$(ls /dev/shm 2>/dev/null | grep -c '^braid-')

# check NAME CONDITION...: counts a failure, with rank 0's output, unless the command succeeds.
check() {
  local name=$1
  shift
  if "$@"; then
    echo "ok: $name"
  else
    echo "FAILED: $name"
    for f in "$out"/[0-9]; do echo "--- rank $(basename "$f") (exit status $(cat "$f.status")):"; tail -20 "$f"; done
    failures=$((failures + 1))
  fi
}

# Every collective and send/recv, checked by the perf tools, 2 hosts x 2 ranks (shared memory
# inside a host, sockets between them) and 3 hosts x 1 rank; both protocols.
for tool in all_reduce all_gather reduce_scatter broadcast reduce alltoall sendrecv; do
  for proto in LL Simple; do
    run_job 4 2 120 "NCCL_PROTO=$proto" -- "$perf/${tool}_perf" -b 8 -e 1M -f 32 -n 3 -w 1 -c 1
    check "$tool 2x2 $proto" grep -q "Out of bounds values : 0 OK" "$out/0"
  done
  run_job 3 1 120 "" -- "$perf/${tool}_perf" -b 1 -e 256K -f 64 -n 2 -w 1 -c 1 -d all
  check "$tool 3x1 every type" grep -q "Out of bounds values : 0 OK" "$out/0"
done
# AlltoAll algorithms that send to one peer while receiving from another in lockstep slices,
# one of them on this host and one on another (connections of both kinds at once).
run_job 4 2 120 "NCCL_ALGO=AlltoAll:Bruck NCCL_PROTO=Simple" -- "$perf/alltoall_perf" -b 8 -e 8M -f 32 -n 2 -w 1 -c 1
check "alltoall 2x2 Bruck (a local and a remote partner at once)" grep -q "Out of bounds values : 0 OK" "$out/0"
run_job 6 2 120 "NCCL_ALGO=AlltoAll:Pairwise NCCL_PROTO=Simple" -- "$perf/alltoall_perf" -b 8 -e 8M -f 32 -n 2 -w 1 -c 1
check "alltoall 3x2 Pairwise (a local and a remote partner at once)" grep -q "Out of bounds values : 0 OK" "$out/0"
run_job 4 1 120 "NCCL_SOCKET_NTHREADS=2 NCCL_NSOCKS_PERTHREAD=2" -- "$perf/all_reduce_perf" -b 4 -e 16M -f 16 -n 3 -c 1
check "all_reduce 4 hosts, 4 sockets per connection" grep -q "Out of bounds values : 0 OK" "$out/0"
run_job 2 1 60 "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=NET" -- "$perf/sendrecv_perf" -b 1M -e 1M -c 1
check "the log names the socket transport" grep -q "via NET/Socket" "$out/0"

# The verbs transport across the namespaces, over the verbs double (its RDMA writes travel
# through /dev/shm, which the namespaces share; the control sockets cross the bridge).
verbs="$build/test/libfake_verbs.so"
if [ -f "$verbs" ]; then
  for tool in all_reduce sendrecv reduce_scatter; do
    run_job 4 2 120 "NCCL_NET=IB BRAID_IBVERBS_LIBRARY=$verbs" -- "$perf/${tool}_perf" -b 8 -e 4M -f 16 -n 3 -w 1 -c 1
    check "$tool 2x2 over IB (verbs double)" grep -q "Out of bounds values : 0 OK" "$out/0"
  done
  run_job 3 1 60 "NCCL_NET=IB BRAID_IBVERBS_LIBRARY=$verbs NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=NET" -- "$perf/all_gather_perf" -b 1M -e 1M -c 1
  check "the log names the verbs transport" grep -q "via NET/IB" "$out/0"
else
  echo "skipped the verbs transport: $verbs was not built (no verbs headers)"
fi

# A net plugin across the namespaces: test/plugins/net_loopback.c (TCP; each rank's plugin
# listens on the address of its namespace's interface, NCCL_SOCKET_IFNAME) carries what goes
# between hosts, shared memory what stays inside one; then its maxRecvs-8, no-sizes and strict builds.
plugins="$build/test/plugins"
if [ -f "$plugins/libnccl-net-loopback.so" ] && [ -f "$plugins/libnccl-net-recvs8.so" ] && [ -f "$plugins/libnccl-net-nosize.so" ] && [ -f "$plugins/libnccl-net-strict.so" ]; then
  for tool in all_reduce all_gather broadcast sendrecv reduce_scatter; do
    run_job 4 2 120 "NCCL_NET_PLUGIN=$plugins/libnccl-net-loopback.so" -- "$perf/${tool}_perf" -b 8 -e 4M -f 16 -n 3 -w 1 -c 1
    check "$tool 2x2 over the loopback net plugin" grep -q "Out of bounds values : 0 OK" "$out/0"
  done
  run_job 4 2 120 "NCCL_NET_PLUGIN=$plugins/libnccl-net-loopback.so NCCL_SHM_DISABLE=1 NCCL_P2P_DISABLE=1 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=NET" \
    -- "$perf/all_reduce_perf" -b 8 -e 4M -f 16 -n 3 -w 1 -c 1
  check "all_reduce 2x2 over the loopback net plugin, every pair on the network" grep -q "Out of bounds values : 0 OK" "$out/0"
  check "the log names the net plugin, not the socket transport" \
    sh -c "grep -q 'via NET/Plugin' '$out/0' && ! grep -q 'via NET/Socket' '$out/0'"
  for tool in all_reduce all_gather broadcast sendrecv; do
    run_job 4 2 120 "NCCL_NET_PLUGIN=$plugins/libnccl-net-recvs8.so" -- "$perf/${tool}_perf" -b 8 -e 4M -f 16 -n 3 -w 1 -c 1
    check "$tool 2x2 over the maxRecvs-8 loopback net plugin" grep -q "Out of bounds values : 0 OK" "$out/0"
  done
  # A v6 plugin whose test never reports sizes (as some widely used ones), every pair on the
  # network: byte sizes on either side of a P2P slot (128 KiB) and a ring slot (512 KiB), 1 and 4099.
  nosize="NCCL_NET_PLUGIN=$plugins/libnccl-net-nosize.so NCCL_SHM_DISABLE=1 NCCL_P2P_DISABLE=1"
  for tool in sendrecv all_gather broadcast alltoall; do
    for range in "-b 1 -e 4099 -i 4098" "-b 131071 -e 131073 -i 1" "-b 524287 -e 524289 -i 1"; do
      run_job 4 2 120 "$nosize" -- "$perf/${tool}_perf" $range -d uint8 -n 2 -w 1 -c 1
      check "$tool 2x2 uint8 $range over the net plugin that reports no sizes" grep -q "Out of bounds values : 0 OK" "$out/0"
    done
  done
  run_job 4 2 120 "$nosize" -- "$perf/all_reduce_perf" -b 4 -e 4M -f 4 -n 2 -w 1 -c 1
  check "all_reduce 2x2 over the net plugin that reports no sizes" grep -q "Out of bounds values : 0 OK" "$out/0"
  # The strict build (test/plugins/net_strict.h: aborts on a call from a second thread on a comm
  # or on setup concurrent with data calls, breaks the endpoint on a close in flight).
  strict="NCCL_NET_PLUGIN=$plugins/libnccl-net-strict.so NCCL_SHM_DISABLE=1 NCCL_P2P_DISABLE=1"
  for tool in all_reduce sendrecv all_gather; do
    run_job 4 2 120 "$strict" -- "$perf/${tool}_perf" -b 8 -e 1M -f 32 -n 2 -w 1 -c 1
    check "$tool 2x2 over the strict net plugin" sh -c "grep -q 'Out of bounds values : 0 OK' '$out/0' && ! grep -q 'strict)' '$out'/[0-9]"
  done
else
  echo "FAILED: the loopback net plugins were not built in $plugins"
  failures=$((failures + 1))
fi

# One-sided operations across hosts (test/integration/rma_main.c): puts of 0, 1, 4099, 1 MiB + 3
# and up to 64 MiB bytes, each seen whole when the signal after them arrives, checked byte by
# byte; a put to every other rank; a put past the window's end refused, naming the offset.
# 2 hosts x 2 ranks (shared memory inside a host, the one-sided links between hosts), 4 x 1,
# 8 ranks on 4 hosts, NCCL_WIN_STRICT_ORDERING, and communicators whose collectives go over the
# verbs double (the puts then go by RDMA: transport/net/ib/one_sided_verbs.h) or a net plugin
# (the puts through the plugin too: transport/net/plugin/one_sided_plugin.h).
rma_main="$build/test/rma_main"
every_rank_says() {  # every_rank_says N TEXT
  local r
  for r in $(seq 0 $(($1 - 1))); do grep -q "$2" "$out/$r" || return 1; done
}
for shape in "4 2 67108864" "4 1 67108864" "8 2 16777216"; do
  set -- $shape
  run_job $1 $2 120 "" -- "$rma_main" $1 @RANK@ check $3
  check "one-sided: $1 ranks, $2 a host, puts up to $3 bytes" every_rank_says $1 "rma ok ($1 ranks"
done
check "one-sided: a put past the window's end is refused, naming its offset" \
  every_rank_says 8 "refused: ncclPutSignal: the put of 2 bytes (count 2) at peerWinOffset [0-9]* does not fit"
run_job 4 2 120 "" -- "$rma_main" 4 @RANK@ check 1048579 strict
check "one-sided: 2 hosts x 2 ranks, NCCL_WIN_STRICT_ORDERING" every_rank_says 4 "rma ok (4 ranks, pieces up to 1048579 bytes, flags 2)"
if [ -f "$verbs" ]; then
  run_job 4 2 120 "NCCL_NET=IB BRAID_IBVERBS_LIBRARY=$verbs NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT" -- "$rma_main" 4 @RANK@ check 4194304
  check "one-sided: 2 hosts x 2 ranks over IB (verbs double)" every_rank_says 4 "rma ok (4 ranks"
  check "one-sided over IB: the puts go by RDMA" every_rank_says 4 "reaches its linked peers by RDMA"
fi
if [ -f "$plugins/libnccl-net-loopback.so" ]; then
  run_job 4 2 120 "NCCL_NET_PLUGIN=$plugins/libnccl-net-loopback.so NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=NET" -- \
    "$rma_main" 4 @RANK@ check 4194304
  check "one-sided: 2 hosts x 2 ranks, collectives over the loopback net plugin" every_rank_says 4 "rma ok (4 ranks"
  check "one-sided: 2 hosts x 2 ranks, puts and signals through the loopback net plugin" \
    every_rank_says 4 "one-sided: rank [0-9] reaches its linked peers through net plugin loopback"
fi
run_job 2 1 60 "" -- "$rma_main" 2 @RANK@ die
check "one-sided: a wait on a rank whose host lost it fails with a remote error naming it" \
  grep -q "rank 0: wait on the dead rank -> 6 after [0-9.]* s: .*rank 1" "$out/0"
# put_perf beside sendrecv_perf, 2 hosts x 1 rank, exact.
for tool in sendrecv put; do
  run_job 2 1 120 "" -- "$perf/${tool}_perf" -b 8 -e 64M -f 8 -n 5 -w 1 -c 1
  check "${tool}_perf across 2 hosts" grep -q "Out of bounds values : 0 OK" "$out/0"
  grep -v '^# [A-Z]' "$out/0" | sed "s/^/  ${tool}_perf: /"
done

# A rank killed on one host: the ranks on the others fail with ncclRemoteError, promptly.
run_job 3 1 60 "" -- "$rank_main" 3 @RANK@ stream 400 kill-at 50 1
for r in 0 2; do
  check "rank $r fails with a remote error when rank 1 dies" grep -q "remote process exited or there was a network error" "$out/$r"
done
check "survivors failed within 10 s" awk '/failed after/ { split($0, a, "failed after "); if (a[2] + 0 > 10) bad = 1 } END { exit bad }' "$out/0" "$out/2"
check "the survivors ended by themselves (status 3: failed and reported)" test "$(cat "$out/0.status" "$out/2.status")" = "$(printf '3\n3')"

# A rank stopped (SIGSTOP) on one host, under NCCL_TIMEOUT: /proc cannot tell the others, but
# each one's report names it, found by asking the rank it waits on, and so on (the watchdog's
# inquiries over the bootstrap channel). The stopped rank is ended by timeout.
run_job 4 1 15 "NCCL_TIMEOUT=2" -- "$rank_main" 4 @RANK@ stream 400 stop-at 20 2
for r in 0 1 3; do
  check "rank $r's NCCL_TIMEOUT report names the stopped rank 2 on another host" \
    grep -q "rank 2\( (rank [0-9]*, which waits on it)\)\? has not answered this rank's watchdog" "$out/$r"
done

# Shrink after a death across hosts: 4 hosts x 1 rank over sockets; rank 0 (whose process also
# served the bootstrap root, NCCL_COMM_ID) and then, in a second job, rank 2 are killed; the
# survivors shrink without it and run 20 exact AllReduces on the new communicator.
for victim in 0 2; do
  run_job 4 1 60 "" -- "$rank_main" 4 @RANK@ stream 400 kill-at 30 $victim shrink
  for r in 0 1 2 3; do
    [ $r = $victim ] && continue
    check "rank $r shrinks without the killed rank $victim and goes on" \
      grep -q "rank $r: shrink ok, 20 exact AllReduces on 3 ranks" "$out/$r"
  done
done

# Growing across hosts: 2 ranks on 2 hosts grow to 3 on 3 hosts (1 rank a host), then 3 ranks
# grow to 8 on 4 hosts (2 a host: shared memory and sockets). Rank 0 asks for the grow id and
# leaves it in a file the new ranks read; all check 20 exact AllReduces on the grown
# communicator, the old ranks 5 more on the parent.
for shape in "3 1 2" "8 2 3"; do
  set -- $shape
  run_job $1 $2 60 "" -- "$rank_main" $1 @RANK@ grow $3 "$out/grow-id-$1"
  for r in $(seq 0 $(($1 - 1))); do
    check "grow $3 -> $1 ($2 rank(s) a host): rank $r exact on the grown communicator" \
      grep -q "rank $r: grow ok, 20 exact AllReduces on $1 ranks" "$out/$r"
  done
done

shm_after=$(ls /dev/shm 2>/dev/null | grep -c '^braid-')
check "no shared-memory files left ($shm_before before, $shm_after after)" test "$shm_after" -le "$shm_before"
rm -rf "$out"
echo "netns: $failures failure(s)"
[ "$failures" = 0 ]
