#!/bin/bash
# The *_perf tools under mpirun (a build with -Dmpi): 3 ranks, every collective checked.
# Skipped (77) with the reason where mpirun is missing.
set -u
perf=$1
command -v mpirun >/dev/null || { echo "SKIP: mpirun is not installed (Debian: openmpi-bin)"; exit 77; }
status=0
for tool in all_reduce all_gather reduce_scatter broadcast reduce alltoall sendrecv; do
  out=$(NCCL_SOCKET_IFNAME=lo timeout 120 mpirun --allow-run-as-root --oversubscribe -np 3 -x NCCL_SOCKET_IFNAME \
        "$perf/${tool}_perf" -b 8 -e 1M -f 32 -c 1 2>&1)
  if grep -q "3 ranks as launched processes" <<<"$out" && grep -q "Out of bounds values : 0 OK" <<<"$out"; then
    echo "ok: $tool under mpirun"
  else
    echo "FAILED: $tool under mpirun"; echo "$out" | tail -20; status=1
  fi
done
exit $status
