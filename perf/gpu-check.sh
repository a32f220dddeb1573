#!/bin/bash
# The GPU check: builds Braid for Hopper on a one-GPU machine and verifies and measures the CUDA
# backend there, in at most 8 minutes, writing what it finds under $OUT (else ./gpu-check-out)
# as it goes. Reads nothing outside the repository; needs nvcc with the static CUDA runtime,
# ninja and meson (Python packages will do), and uses PyTorch and NVIDIA's NCCL beside it where
# they are installed.
#
# Stage 1 (about 4 minutes at most): the build (-Dcuda-arch=90, the kernels the checks use, no
# Catch2 suites), the gpu suite's single-process tests, then its multi-process ones, each under
# its own time limit (a hang costs only itself), a 1-rank all_reduce_perf. Stage 2, while time
# is left: the algorithm sweep, all_reduce, all_gather, reduce_scatter and sendrecv_perf on 1,
# 2 and 4 ranks of the one GPU (threads, 8 B to $BRAID_GPU_CHECK_MAX, 256 MiB unless set,
# checked), the same 1-rank runs through NVIDIA's NCCL, the device-to-device copy bandwidth, and
# PyTorch (torch.distributed.run, 2 ranks on the GPU, Braid in LD_PRELOAD) against one process.
# Standard output is the one-screen summary (repeated whole at the end); the details go to
# files (at most 8, for the device tool): summary.txt, build.log, gpu-suite.log, perf.log
# (every *_perf table), nvidia.log, torch.log, gpu-tuning.txt (the GPU tuner's figures as
# measured: base and hop latency, bandwidth per channel).
#
#   perf/gpu-check.sh            # or: OUT=/some/folder BRAID_GPU_CHECK_MAX=1G perf/gpu-check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/gpu-check-out}
mkdir -p "$out"
build=${BRAID_GPU_BUILD:-build-gpu}
budget=${BRAID_GPU_CHECK_SECONDS:-480}
max_size=${BRAID_GPU_CHECK_MAX:-256M}
start=$(date +%s)
export PATH="/usr/local/cuda/bin:$PATH"
export NCCL_SOCKET_IFNAME=lo
# Streams on separate hardware queues: ranks of one GPU spin in their kernels waiting for each
# other, which a queue shared by two ranks' streams would turn into a hang.
export CUDA_DEVICE_MAX_CONNECTIONS=32
# Every kernel loaded at start, for Braid's own commands only (a hidden wait for the device in
# a lazy load could hang ranks that spin in kernels; Braid loads its kernels itself too, and
# this covers the benchmarks' own). Not for PyTorch, whose eager load of every kernel it ships
# takes minutes.
braid_env=(env CUDA_MODULE_LOADING=EAGER)
summary="$out/summary.txt"
: > "$summary"
say() { echo "$*" | tee -a "$summary"; }
elapsed() { echo $(( $(date +%s) - start )); }
# left SECONDS: whether that many seconds remain of the budget.
left() { [ $(( budget - $(elapsed) )) -ge "$1" ]; }

say "# Braid GPU check, $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
say "# $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1); $(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*')"
nvidia-smi -L > /dev/null 2>&1 ||
  say "# no GPU visible (nvidia-smi -L failed): the gpu suite skips and the benchmarks run on the host backend"

# ---- tools: meson and ninja as commands or Python packages; the static CUDA runtime -------------
if command -v meson > /dev/null; then
  meson=(meson)
elif python3 -c 'import mesonbuild.mesonmain' 2> /dev/null; then
  meson=(python3 -m mesonbuild.mesonmain)
else
  say "FAIL tools: meson not found (neither a meson command nor python3 -m mesonbuild.mesonmain)"
  exit 1
fi
if ! command -v ninja > /dev/null; then
  ninja_bin=$(python3 -c 'import ninja, os; print(os.path.join(ninja.BIN_DIR, "ninja"))' 2> /dev/null)
  if [ -n "$ninja_bin" ] && [ -x "$ninja_bin" ]; then
    export NINJA="$ninja_bin"
  else
    say "FAIL tools: ninja not found (neither a ninja command nor the ninja Python package)"
    exit 1
  fi
fi
cuda_root=$(dirname "$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")
cudart_static=$(find "$cuda_root/lib64/" "$cuda_root/targets/"*/lib/ -maxdepth 1 -name libcudart_static.a 2> /dev/null | head -1)
if [ -z "$cudart_static" ]; then
  say "FAIL tools: libcudart_static.a not found under $cuda_root (Braid links the CUDA runtime statically)"
  exit 1
fi
say "# tools: ${meson[*]}, ninja ${NINJA:-$(command -v ninja)}, $cudart_static"

# ---- stage 1: build, gpu suite, one quick benchmark ---------------------------------------------
funcs='*:f32,sum:f64,sum:i32,sum:i64,sum:f16,sum:bf16'
if [ ! -f "$build/build.ninja" ]; then
  "${meson[@]}" setup "$build" --buildtype=release -Dcuda=enabled -Dcuda-arch=90 -Dcatch2=disabled -Dmpi=disabled \
    -Dhwloc=disabled -Dibverbs=disabled -Donly_funcs="$funcs" > "$out/build.log" 2>&1 ||
    { say "FAIL build: meson setup (see build.log)"; exit 1; }
fi
targets=(nccl:shared_library gpu_test all_reduce_perf all_gather_perf reduce_scatter_perf sendrecv_perf)
if ! "${meson[@]}" compile -C "$build" -j "$(nproc)" "${targets[@]}" >> "$out/build.log" 2>&1; then
  say "FAIL build: ninja (see build.log)"
  tail -30 "$out/build.log"
  exit 1
fi
say "build: $(elapsed) s"

suite_status=0
# suite NAME LIMIT: one gpu suite test under its own limit (it also ends itself after 60 s with
# Braid's report of the channels; the algorithm sweep after 150 s).
suite() {
  local rc=0
  { echo "### gpu-$1"; timeout "$2" "${braid_env[@]}" "${meson[@]}" test -C "$build" --no-rebuild --print-errorlogs "gpu-$1"; } \
    >> "$out/gpu-suite.log" 2>&1 || rc=$?
  local line
  line=$(grep -E '^ *[0-9]+/[0-9]+ ' "$out/gpu-suite.log" | tail -n 1 | awk '{print $4, $5, $6}')
  [ "$rc" = 0 ] || suite_status=1
  say "gpu suite: gpu-$1: ${line:-no result} (exit $rc, $(elapsed) s)"
  # A failure of the first tests run on a GPU: once more with the launches' work in mapped host
  # memory (kernels/launch_args.h not used), so that the summary tells the two apart.
  if [ "$rc" != 0 ] && { [ "$1" = one-rank ] || [ "$1" = threads ]; }; then
    local again=0
    { echo "### gpu-$1 with BRAID_INLINE_LAUNCH_ARGS=0"; timeout "$2" "${braid_env[@]}" env BRAID_INLINE_LAUNCH_ARGS=0 \
        "${meson[@]}" test -C "$build" --no-rebuild --print-errorlogs "gpu-$1"; } >> "$out/gpu-suite.log" 2>&1 || again=$?
    say "gpu suite: gpu-$1 again with BRAID_INLINE_LAUNCH_ARGS=0: exit $again ($(elapsed) s)"
  fi
}
: > "$out/gpu-suite.log"
# One process first, then the tests that fork ranks as processes (these need several processes
# on one GPU: slow without MPS, since their kernels are then time-sliced).
for name in one-rank threads streams errors graphs groups memalloc host-backend; do suite "$name" 75; done
for name in processes watchdog; do
  left 120 || { say "gpu suite: gpu-$name: not run (out of time)"; continue; }
  suite "$name" 90
done

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
run "braid all_reduce 1 rank (quick)" 60 "${braid_env[@]}" "$build/perf/all_reduce_perf" --threads --ranks 1 -b 8 -e 64M -f 8 -n 10 -w 20 -c 1
say "all_reduce_perf, 1 rank, 8 B..64 MiB: exit status $? ($(elapsed) s)"

# ---- stage 2: the algorithm sweep, the benchmarks, NVIDIA's NCCL, PyTorch -----------------------
if left 300; then
  suite algorithms 170
else
  say "gpu suite: gpu-algorithms: not run (less than 300 s left: the benchmarks come first)"
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
    run "braid $tool $ranks" 75 "${braid_env[@]}" "$build/perf/${tool}_perf" --threads --ranks "$ranks" -b 8 -e "$max_size" -f 8 -n 10 -w 20 -c 1
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
    run "nvidia $tool 1" 60 env LD_PRELOAD="$nvidia_lib" "$build/perf/${tool}_perf" --threads --ranks 1 -b 8 -e "$max_size" -f 8 -n 10 -w 20 -c 1
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
say "columns: time of the smallest size (8 B, or the tool's least); busbw at the largest size, $max_size (algbw for 1 rank,"
say "where busbw is 0); x ranks/copy: ranks x busbw over the copy bandwidth (the ranks share one GPU's memory; target 0.5)."

# ---- the GPU tuner's figures, as measured here (topology/tuner.cc's kGpuCostTable) ---------------
# Ring AllReduce on n ranks of one GPU costs base + 2(n-1) hops at 8 bytes (the LL latency the
# table models), and moves bytes at channels x the per-channel bandwidth: the 2- and 4-rank
# 8-byte times give the hop and the base; one run at the largest size, logging its choice,
# gives the channels behind the busbw. Written to gpu-tuning.txt, for a session to put into the
# table (with the run's date and commit), not applied by itself.
tuning="$out/gpu-tuning.txt"
if left 25; then
  read -r t2 _ bus2 _ <<< "${row["braid all_reduce 2"]:-? ? ? ?}"
  read -r t4 _ _ _ <<< "${row["braid all_reduce 4"]:-? ? ? ?}"
  channels=$(timeout 20 "${braid_env[@]}" env NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL "$build/perf/all_reduce_perf" --threads \
             --ranks 2 -b "$max_size" -e "$max_size" -n 2 -w 1 -c 0 2>&1 | grep -o '[0-9]* channel(s)' | head -1 | awk '{print $1}')
  awk -v t2="$t2" -v t4="$t4" -v bus="$bus2" -v c="${channels:-?}" -v size="$max_size" -v when="$(date -u +%F)" \
      -v commit="$(git rev-parse --short HEAD 2>/dev/null || echo '?')" 'BEGIN {
    print "# Braid GPU tuner figures measured by perf/gpu-check.sh on " when ", commit " commit
    print "# (ranks of one GPU, Ring AllReduce; compare topology/tuner.cc kGpuCostTable)"
    if (t2 + 0 > 0 && t4 + 0 > 0) {
      hop = (t4 - t2) / 4; base = t2 - 2 * hop
      printf "baseLatency ring LL (us): %.2f\nhopLatency within a GPU, LL (us): %.2f\n", base, hop
      if (base < 0 || hop < 0) print "(a negative figure: the 2- and 4-rank times do not fit base + 2(n-1) hops; measure again)"
    } else print "latency: not measured (8-byte all_reduce on 2 and 4 ranks missing)"
    if (bus + 0 > 0 && c + 0 > 0) printf "channelBandwidth within a GPU, Simple (GB/s a channel): %.1f (busbw %s GB/s at %s on %s channels, 2 ranks)\n", bus / c, bus, size, c
    else print "channel bandwidth: not measured (busbw " bus ", channels " c ")"
  }' > "$tuning"
  while read -r line; do say "tuning: $line"; done < "$tuning"
else
  say "tuning: not measured (out of time)"
fi
say "total: $(elapsed) s"
echo
echo "=== the summary again, whole (summary.txt)"
cat "$summary"
[ "$suite_status" = 0 ] || exit 1
