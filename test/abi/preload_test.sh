#!/bin/bash
# Usage: preload_test.sh PROBE BRAID_LIBNCCL_SO
# PROBE is linked against NVIDIA's libnccl.so.2. Run plainly it must map NVIDIA's
# library (the control); run with LD_PRELOAD it must map Braid's only.
set -u
if [ "$1" = "-" ]; then
  echo "SKIP: NVIDIA's libnccl.so.2 and nccl.h are not installed under /usr/local/cuda"
  exit 77
fi
probe=$1
ours=$(readlink -f "$2")
status=0
# meson test points LD_LIBRARY_PATH at the build folder, which holds Braid's libnccl.so.2.
unset LD_LIBRARY_PATH

control=$("$probe" 2>&1)
echo "--- without LD_PRELOAD:"; echo "$control"
if ! echo "$control" | grep -q "^mapped .*/cuda.*/libnccl"; then
  echo "control run did not map NVIDIA's library; the test could not tell the two apart"
  status=1
fi

preloaded=$(LD_PRELOAD="$ours" "$probe" 2>&1)
echo "--- with LD_PRELOAD=$ours:"; echo "$preloaded"
echo "$preloaded" | grep -q "^ncclGetVersion -> 0, version 23007$" || { echo "wrong version answer"; status=1; }
echo "$preloaded" | grep -q "^provider $ours$" || { echo "ncclGetVersion is not Braid's"; status=1; }
while read -r _ path; do
  [ "$(readlink -f "$path")" = "$ours" ] || { echo "unexpected library mapped: $path"; status=1; }
done < <(echo "$preloaded" | grep "^mapped ")
exit $status
