#!/bin/bash
# The GPU check: builds Braid for Hopper on a one-GPU machine and verifies and measures the CUDA
# backend there, in at most 6 minutes, writing what it finds under $OUT (else ./gpu-check-out)
# as it goes. Reads nothing outside the repository; needs nvcc, ninja and meson (a Python package
# will do), and uses PyTorch and NVIDIA's NCCL beside it where they are installed.
#
# Stage 1 (about 3 minutes at most): the build (-Dcuda-arch=90, the kernels the checks use, no
# Catch2 suites), the gpu suite, a 1-rank all_reduce_perf. Stage 2: all_reduce, all_gather,
# reduce_scatter and sendrecv_perf on 1, 2 and 4 ranks of the one GPU (threads, 8 B to 1 GiB,
# checked), the same 1-rank runs through NVIDIA's NCCL, the device-to-device copy bandwidth, and
# PyTorch (torch.distributed.run, 2 ranks on the GPU, Braid in LD_PRELOAD) against one process.
# Files (at most 8, for the device tool): summary.txt (the table), build.log, gpu-suite.log,
# perf.log (every *_perf table), nvidia.log, torch.log.
#
#   perf/gpu-check.sh            # or: OUT=/some/folder perf/gpu-check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/gpu-check-out}
mkdir -p "$out"
build=${BRAID_GPU_BUILD:-build-gpu}
start=$(date +%s)
export PATH="/usr/local/cuda/bin:$PATH"
export NCCL_SOCKET_IFNAME=lo
# Every kernel loaded at start, and streams on separate hardware queues: ranks of one GPU spin
# in their kernels waiting for each other, which a hidden wait for the device (a lazy load) or
# a queue shared by two ranks' streams would turn into a hang. (Braid loads its kernels itself
# too; these also cover the benchmark's own.)
export CUDA_MODULE_LOADING=EAGER CUDA_DEVICE_MAX_CONNECTIONS=32
summary="$out/summary.txt"
: > "$summary"
say() { echo "$*" | tee -a "$summary"; }
elapsed() { echo $(( $(date +%s) - start )); }
# left SECONDS: whether that many seconds remain of the 6 minutes.
left() { [ $(( 360 - $(elapsed) )) -ge "$1" ]; }

say "# Braid GPU check, $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
say "# $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1); $(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*')"

# ---- stage 1: build, gpu suite, one quick benchmark ---------------------------------------------
funcs='*:f32,sum:f64,sum:i32,sum:i64,sum:f16,sum:bf16'
if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" --buildtype=release -Dcuda=enabled -Dcuda-arch=90 -Dcatch2=disabled -Dmpi=disabled \
    -Dhwloc=disabled -Dibverbs=disabled -Donly_funcs="$funcs" > "$out/build.log" 2>&1 ||
    { say "FAIL build: meson setup (see build.log)"; exit 1; }
fi
targets=(nccl:shared_library gpu_test all_reduce_perf all_gather_perf reduce_scatter_perf sendrecv_perf)
if ! meson compile -C "$build" -j "$(nproc)" "${targets[@]}" >> "$out/build.log" 2>&1; then
  say "FAIL build: ninja (see build.log)"
  tail -30 "$out/build.log"
  exit 1
fi
say "build: $(elapsed) s"

suite_status=0
# (each test ends itself after 60 s with Braid's report of the channels; the algorithm sweep,
# up to 150 s, waits for stage 2)
essentials=(gpu-one-rank gpu-threads gpu-streams gpu-errors gpu-graphs gpu-groups gpu-memalloc gpu-host-backend gpu-processes gpu-watchdog)
timeout 170 meson test -C "$build" --no-rebuild --print-errorlogs "${essentials[@]}" > "$out/gpu-suite.log" 2>&1 ||
  suite_status=$?
suite_lines() { grep -E '^ *[0-9]+/[0-9]+ ' "$out/gpu-suite.log" | awk '{print $4, $5, $6}' | tail -n "$1"; }
while read -r line; do say "gpu suite: $line"; done < <(suite_lines 100)
say "gpu suite: exit status $suite_status ($(elapsed) s)"

perf_log="$out/perf.log"
: > "$perf_log"
last=$(mktemp)
trap 'rm -f "$last"' EXIT
# run LABEL TIMEOUT COMMAND...: one *_perf table, appended to $perf_log and kept in $last.
run() {
  local label=$1 limit=$2
  shift 2
  timeout "$limit" "$@" > "$last" 2>&1
  local rc=$?
  { echo "### $label: $*"; cat "$last"; echo "### $label: exit status $rc"; } >> "$perf_log"
  return $rc
}
run "braid all_reduce 1 rank (quick)" 60 "$build/perf/all_reduce_perf" --threads --ranks 1 -b 8 -e 64M -f 8 -n 10 -w 2 -c 1
say "all_reduce_perf, 1 rank, 8 B..64 MiB: exit status $? ($(elapsed) s)"

# ---- stage 2: the algorithm sweep, the benchmarks, NVIDIA's NCCL, PyTorch -----------------------
if left 200; then
  timeout 170 meson test -C "$build" --no-rebuild --print-errorlogs gpu-algorithms >> "$out/gpu-suite.log" 2>&1 ||
    suite_status=$?
  say "gpu suite: $(suite_lines 1) ($(elapsed) s)"
fi
nvidia_lib=$(python3 - 2>/dev/null <<'PY'
import glob, os
try:
    import nvidia.nccl
    roots = list(nvidia.nccl.__path__)
except Exception:
    roots = []
for root in roots:
    for path in glob.glob(os.path.join(root, "lib", "libnccl.so*")):
        print(path)
        raise SystemExit
PY
)
copy_bw=$(python3 - 2>/dev/null <<'PY'
import torch
a = torch.empty(1 << 30, dtype=torch.uint8, device="cuda"); b = torch.empty_like(a)
b.copy_(a); torch.cuda.synchronize()
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
s.record()
for _ in range(20): b.copy_(a)
e.record(); torch.cuda.synchronize()
print("%.1f" % ((1 << 30) * 20 / (s.elapsed_time(e) * 1e6)))
PY
)
say "device-to-device copy (1 GiB, bytes copied per second): ${copy_bw:-?} GB/s"

declare -A row
# "time(smallest) algbw busbw" of the latest table: its first row's time, its last row's bandwidths.
last_table() {
  awk '$1 ~ /^[0-9]+$/ && NF >= 9 {if (first == "") first = $6; a = $7; b = $8} END {
    printf "%s %s %s", (first != "" ? first : "?"), (a != "" ? a : "?"), (b != "" ? b : "?") }' "$last"
}
for tool in all_reduce all_gather reduce_scatter sendrecv; do
  for ranks in 1 2 4; do
    left 40 || { say "stage 2: out of time before $tool on $ranks ranks"; break 2; }
    run "braid $tool $ranks" 75 "$build/perf/${tool}_perf" --threads --ranks "$ranks" -b 8 -e "${BRAID_GPU_CHECK_MAX:-1G}" -f 8 -n 10 -w 2 -c 1
    rc=$?
    row["braid $tool $ranks"]="$(last_table) rc=$rc"
  done
done

if [ -n "$nvidia_lib" ]; then
  echo "NVIDIA's NCCL: $nvidia_lib" > "$out/nvidia.log"
  for tool in all_reduce all_gather reduce_scatter sendrecv; do
    left 30 || { say "stage 2: out of time before NVIDIA's $tool"; break; }
    saved=$perf_log
    perf_log="$out/nvidia.log"
    run "nvidia $tool 1" 60 env LD_PRELOAD="$nvidia_lib" "$build/perf/${tool}_perf" --threads --ranks 1 -b 8 -e "${BRAID_GPU_CHECK_MAX:-1G}" -f 8 -n 10 -w 2 -c 1
    rc=$?
    row["nvidia $tool 1"]="$(last_table) rc=$rc"
    perf_log=$saved
  done
else
  say "NVIDIA's NCCL: not found beside PyTorch (python3 -c 'import nvidia.nccl'): no comparison"
fi

torch_status=skipped
if python3 -c 'import torch, torch.distributed' 2>/dev/null; then
  for n in 1 2; do
    left 45 || { torch_status="$torch_status/$n:out-of-time"; continue; }
    echo "### torch_check, $n rank(s) on the GPU, LD_PRELOAD=$build/libnccl.so.2" >> "$out/torch.log"
    LD_PRELOAD="$PWD/$build/libnccl.so.2" timeout 100 python3 -m torch.distributed.run --standalone \
      --nproc_per_node="$n" perf/torch_check.py >> "$out/torch.log" 2>&1
    torch_status="$torch_status/$n:$?"
  done
  torch_status=${torch_status#skipped/}
fi
say "PyTorch check (exit status per rank count): $torch_status; $(grep -h 'torch_check:' "$out/torch.log" 2>/dev/null | tr '\n' ' ')"

say ""
say "$(printf '%-15s %5s  %14s %14s %12s   %14s %14s   %s' collective ranks 'braid 8B us' 'braid busbw' 'x ranks/copy' 'nvidia 8B us' 'nvidia algbw' 'exit')"
for tool in all_reduce all_gather reduce_scatter sendrecv; do
  for ranks in 1 2 4; do
    read -r t8 algbw busbw rc <<< "${row["braid $tool $ranks"]:-? ? ? rc=?}"
    [ "$ranks" = 1 ] && busbw=$algbw  # (one rank: busbw is 0 by definition)
    share="?"
    if [ -n "${copy_bw:-}" ] && [ "$busbw" != "?" ]; then
      share=$(awk -v b="$busbw" -v n="$ranks" -v c="$copy_bw" 'BEGIN { printf "%.2f", b * n / c }')
    fi
    nv="-  -"
    [ "$ranks" = 1 ] && nv=$(echo "${row["nvidia $tool 1"]:-? ? ? rc=?}" | awk '{print $1, $2}')
    say "$(printf '%-15s %5s  %14s %14s %12s   %14s %14s   %s' "$tool" "$ranks" "$t8" "$busbw" "$share" $nv "$rc")"
  done
done
say ""
say "columns: time of the smallest size (8 B, or the tool's least); busbw at 1 GiB (algbw for 1 rank, where busbw is 0);"
say "x ranks/copy: ranks x busbw over the copy bandwidth (the ranks share one GPU's memory; target 0.5 at 1 GiB)."
say "total: $(elapsed) s"
[ "$suite_status" = 0 ] || exit 1
