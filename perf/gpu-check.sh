#!/bin/bash
# The GPU check: one call on a bare one-GPU machine (CUDA with nvcc; meson and ninja as commands
# or Python packages; PyTorch and NVIDIA's NCCL beside it where installed) that builds Braid for
# Hopper and returns figures within BRAID_GPU_CHECK_SECONDS (510 s: under the 9 minutes such a
# machine is lent for), whatever hangs or fails on the way. In this order, each run under its
# own limit (BRAID_GPU_CHECK_RUN_SECONDS, 45 s), the first run of a kind that times out
# skipping the rest of that kind:
#   1. all_reduce_perf on 1 and 2 ranks (threads of one process), 8 B to BRAID_GPU_CHECK_MAX
#      (1 GiB), with NCCL_PROTO=Simple, then LL, then LL128; each 1-rank table also through
#      NVIDIA's NCCL (the same binary, torch's libnccl.so.2 first on LD_LIBRARY_PATH), and the
#      time ratio printed for each size (NVIDIA's NCCL refuses two ranks on one GPU);
#   2. sendrecv_perf and alltoall_perf, the same way, with the default protocols;
#   3. the gpu suite's tests (test/gpu/gpu_test.cc), one run each;
#   4. PyTorch's check (perf/torch_check.py, 1 and 2 ranks, Braid in LD_PRELOAD).
# Everything is appended under $OUT (else ./gpu-check-out) as each run ends, in 7 files (the
# device tool brings back 8): summary.txt (what standard output shows), build.log, perf.log
# (Braid's tables), nvidia.log (NVIDIA's), compare.txt (the ratios), gpu-suite.log, torch.log.
#
#   perf/gpu-check.sh        # or: OUT=dir BRAID_GPU_CHECK_MAX=256M BRAID_GPU_CHECK_SECONDS=300 perf/gpu-check.sh
#
# The dry run (test/gpu_check_dry.sh, the 'perf' suite) runs this whole script on a machine
# without a GPU, with a fake nvidia-smi, torch and NVIDIA package on PATH and PYTHONPATH: the
# perf tools then run on the host backend, so every step before the GPU is exercised. For it:
# BRAID_GPU_CHECK_FUNCS sets the kernels built (-Donly_funcs), BRAID_GPU_CHECK_BUILD=skip uses
# $BRAID_GPU_BUILD as it is (CI's own build), BRAID_GPU_CHECK_STALL=KIND makes that kind's runs
# sleep past their limit (the timeout and skip-the-rest path), BRAID_GPU_CHECK_JOBS sets the
# build's jobs (16), BRAID_GPU_CHECK_ITERS the timed iterations (20).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/gpu-check-out}
mkdir -p "$out"
build=${BRAID_GPU_BUILD:-build-gpu}
budget=${BRAID_GPU_CHECK_SECONDS:-510}
run_limit=${BRAID_GPU_CHECK_RUN_SECONDS:-45}
max_size=${BRAID_GPU_CHECK_MAX:-1G}
iters=${BRAID_GPU_CHECK_ITERS:-20}
jobs=${BRAID_GPU_CHECK_JOBS:-16}
stall=${BRAID_GPU_CHECK_STALL:-}
start=$(date +%s)
export PATH="$PATH:/usr/local/cuda/bin"
export NCCL_SOCKET_IFNAME=lo
# Two ranks of one process each spin in a kernel waiting for the other: their streams need
# hardware queues of their own (Braid also sets this itself when the variable is unset).
export CUDA_DEVICE_MAX_CONNECTIONS=32
# Braid's commands load every kernel at start (a lazy load waits for the whole device, ranks'
# spinning kernels included). Not NVIDIA's NCCL or PyTorch: their eager load takes minutes.
braid_env=(env CUDA_MODULE_LOADING=EAGER)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for f in summary.txt build.log perf.log nvidia.log compare.txt gpu-suite.log torch.log; do : > "$out/$f"; done
summary="$out/summary.txt"
say() { echo "$*" | tee -a "$summary"; }
elapsed() { echo $(( $(date +%s) - start )); }

say "# Braid GPU check, $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), budget $budget s"
gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
say "# GPU: ${gpu:-none visible (nvidia-smi failed): the perf tools run on the host backend, the gpu suite skips}"

# ---- the tools: each missing one ends the check with one line that says why -----------------------
if command -v meson > /dev/null; then
  meson=(meson)
elif python3 -c 'import mesonbuild.mesonmain' 2> /dev/null; then
  meson=(python3 -m mesonbuild.mesonmain)
else
  say "FAIL build cannot start: meson not found (no meson command, no python3 -m mesonbuild.mesonmain)"
  exit 1
fi
if ! command -v ninja > /dev/null; then
  ninja_bin=$(python3 -c 'import ninja, os; print(os.path.join(ninja.BIN_DIR, "ninja"))' 2> /dev/null)
  [ -n "$ninja_bin" ] && [ -x "$ninja_bin" ] ||
    { say "FAIL build cannot start: ninja not found (no ninja command, no ninja Python package)"; exit 1; }
  export NINJA="$ninja_bin"
fi
# (nvcc and the static CUDA runtime only for a build: a check of a build as it is needs neither)
why=""
if ! nvcc=$(command -v nvcc); then
  why="nvcc not found (PATH, /usr/local/cuda/bin)"
elif ! find "$(dirname "$(dirname "$nvcc")")/"{lib64,targets/*/lib}/ -maxdepth 1 -name libcudart_static.a 2> /dev/null | grep -q .; then
  why="libcudart_static.a not found beside $nvcc (Braid links the CUDA runtime statically)"
fi
if [ -n "$why" ] && [ "${BRAID_GPU_CHECK_BUILD:-}" != skip ]; then
  say "FAIL build cannot start: $why"
  exit 1
fi
say "# tools: ${meson[*]}, ninja ${NINJA:-$(command -v ninja)}, ${why:-$nvcc ($("$nvcc" --version | grep -o 'release [0-9.]*'))}"

# ---- the build: Hopper, no Catch2, the kernels the runs use, given at most all but 150 s ----------
# (the perf tools sum floats and, in their setup, a double; the gpu suite sums floats; the
# copying and point-to-point kernels serve every type: nvcc's longest units are left out)
funcs=${BRAID_GPU_CHECK_FUNCS:-sum:f32,sum:f64}
targets=(nccl:shared_library gpu_test gpu_one_sided all_reduce_perf sendrecv_perf alltoall_perf)
if [ "${BRAID_GPU_CHECK_BUILD:-}" = skip ]; then
  say "build: skipped (BRAID_GPU_CHECK_BUILD=skip: $build as it is)"
else
  if [ ! -f "$build/build.ninja" ]; then
    "${meson[@]}" setup "$build" --buildtype=release -Dcuda=enabled -Dcuda-arch=90 -Dcatch2=disabled -Dmpi=disabled \
      -Dhwloc=disabled -Dibverbs=disabled -Donly_funcs="$funcs" >> "$out/build.log" 2>&1 ||
      { say "FAIL build: meson setup failed: $(grep -m1 -E 'ERROR|error' "$out/build.log")"; exit 1; }
  fi
  timeout $(( budget - 150 )) "${meson[@]}" compile -C "$build" -j "$jobs" "${targets[@]}" >> "$out/build.log" 2>&1
  rc=$?
  [ "$rc" = 124 ] && { say "FAIL build: not done within $(( budget - 150 )) s (see build.log)"; exit 1; }
  [ "$rc" = 0 ] || { say "FAIL build: $(grep -m1 -E 'error|FAILED' "$out/build.log")"; exit 1; }
  say "build: done in $(elapsed) s"
fi

# ---- NVIDIA's NCCL beside PyTorch: found by its Python package, loaded by LD_LIBRARY_PATH ---------
nvidia_dir=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2> /dev/null)
nvidia_env=()
if [ -n "$nvidia_dir" ] && [ -e "$nvidia_dir/libnccl.so.2" ]; then
  nvidia_version=$(python3 -c 'import importlib.metadata as m; print(m.version("nvidia-nccl-cu13"))' 2> /dev/null || echo '?')
  nvidia_env=(env "LD_LIBRARY_PATH=$nvidia_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
  # (the perf tools find Braid's library by their RUNPATH, which LD_LIBRARY_PATH comes before;
  # an RPATH would come first: then the library is preloaded instead)
  resolved=$("${nvidia_env[@]}" ldd "$build/perf/all_reduce_perf" 2> /dev/null | awk '$1 == "libnccl.so.2" {print $3}')
  if [ "$resolved" != "$nvidia_dir/libnccl.so.2" ]; then
    nvidia_env=(env "LD_PRELOAD=$nvidia_dir/libnccl.so.2")
    say "# NVIDIA's NCCL $nvidia_version: $nvidia_dir/libnccl.so.2 (in LD_PRELOAD: LD_LIBRARY_PATH resolved ${resolved:-nothing})"
  else
    say "# NVIDIA's NCCL $nvidia_version: $nvidia_dir/libnccl.so.2 (first on LD_LIBRARY_PATH)"
  fi
else
  say "# NVIDIA's NCCL: not found (python3 -c 'import nvidia.nccl' gives no lib/libnccl.so.2): no comparison"
fi

# ---- the runs ---------------------------------------------------------------------------------------
declare -A timed_out  # kind -> the run that timed out
failed=0              # runs that failed or timed out
# step KIND ID LOG COMMAND...: one run under its own limit, its output appended to LOG and kept
# as $tmp/ID.txt; its status in $status. Not run (status 'skipped') after a timeout of its kind
# or when too little of the budget is left.
step() {
  local kind=$1 id=$2 log=$3
  shift 3
  local limit=$(( budget - $(elapsed) - 10 ))
  [ "$limit" -gt "$run_limit" ] && limit=$run_limit
  status=skipped
  if [ -n "${timed_out[$kind]:-}" ]; then
    say "$id: not run (${timed_out[$kind]} timed out: the rest of $kind is skipped)"
    return
  fi
  if [ "$limit" -lt 5 ]; then
    say "$id: not run (out of time: $(elapsed) s of $budget)"
    return
  fi
  [ "$kind" = "$stall" ] && set -- sleep 3600  # (the dry run's stand-in for a hang)
  timeout -k 5 "$limit" "$@" > "$tmp/$id.txt" 2>&1
  status=$?
  { echo "### $id: $*"; cat "$tmp/$id.txt"; echo "### $id: exit status $status ($(elapsed) s)"; } >> "$log"
  if [ "$status" = 124 ] || [ "$status" = 137 ]; then
    timed_out[$kind]=$id
    status="timed out after $limit s"
  fi
  [ "$status" = 0 ] || [ "$status" = 77 ] || failed=$((failed + 1))
}

# table_line ID: "8 B TIME us, MAX ALGBW GB/s (busbw BUSBW)" from a run's table, or why there is none.
table_line() {
  [ -f "$tmp/$1.txt" ] || return
  awk '$1 ~ /^[0-9]+$/ && NF >= 13 {if (!n++) {s0 = $1; t0 = $6} s = $1; a = $7; b = $8}
       / FAILED$/ {wrong = 1}
       {last = $0}
       END { if (!n) { printf "no table: %s", substr(last, 1, 240); exit }
             printf "%s B %s us .. %s B %s GB/s (busbw %s)%s", s0, t0, s, a, b, wrong ? ", WRONG RESULTS" : "" }' "$tmp/$1.txt"
}

# compare LABEL BRAID_ID NVIDIA_ID: the two tables side by side with Braid's time over NVIDIA's
# for each size, appended to compare.txt and said.
compare() {
  [ -s "$tmp/$2.txt" ] && [ -s "$tmp/$3.txt" ] || return
  awk -v label="$1" '
    $1 ~ /^[0-9]+$/ && NF >= 13 { if (FILENAME == ARGV[1]) { bt[$1] = $6; ba[$1] = $7; order[++n] = $1 } else { nt[$1] = $6; na[$1] = $7 } }
    END {
      printf "## %s: Braid against NVIDIA'"'"'s NCCL (ratio: Braid'"'"'s time over NVIDIA'"'"'s, above 1 Braid is slower)\n", label
      printf "%12s %11s %11s %7s %12s %12s\n", "size (B)", "braid us", "nvidia us", "ratio", "braid GB/s", "nvidia GB/s"
      for (i = 1; i <= n; ++i) {
        s = order[i]
        if (!(s in nt)) { printf "%12s %11s %11s %7s %12s %12s\n", s, bt[s], "-", "-", ba[s], "-"; continue }
        printf "%12s %11s %11s %7s %12s %12s\n", s, bt[s], nt[s], (nt[s] + 0 > 0 ? sprintf("%.2f", bt[s] / nt[s]) : "-"), ba[s], na[s]
      }
    }' "$tmp/$2.txt" "$tmp/$3.txt" > "$tmp/compare.txt"
  cat "$tmp/compare.txt" >> "$out/compare.txt"
  tee -a "$summary" < "$tmp/compare.txt"
}

# perf KIND-TOOL PROTO: Braid's 1- and 2-rank tables, NVIDIA's 1-rank table, and the ratios.
perf() {
  local tool=$1 proto=$2 ranks
  local args=(-b 8 -e "$max_size" -f 2 -n "$iters" -w 5 -c 1)
  local penv=()
  [ "$proto" != default ] && penv=("NCCL_PROTO=$proto")
  for ranks in 1 2; do
    step "braid $tool" "braid-$tool-$proto-$ranks" "$out/perf.log" \
      "${braid_env[@]}" "${penv[@]}" "$build/perf/${tool}_perf" --threads --ranks "$ranks" "${args[@]}"
    [ "$status" = skipped ] || say "braid $tool, $ranks rank(s), NCCL_PROTO=$proto: $status; $(table_line "braid-$tool-$proto-$ranks")"
  done
  [ ${#nvidia_env[@]} -gt 0 ] || return
  step "nvidia $tool" "nvidia-$tool-$proto-1" "$out/nvidia.log" \
    "${nvidia_env[@]}" "${penv[@]}" "$build/perf/${tool}_perf" --threads --ranks 1 "${args[@]}"
  [ "$status" = skipped ] || say "nvidia $tool, 1 rank, NCCL_PROTO=$proto: $status; $(table_line "nvidia-$tool-$proto-1")"
  [ "$status" = 0 ] && compare "$tool, 1 rank, NCCL_PROTO=$proto" "braid-$tool-$proto-1" "nvidia-$tool-$proto-1"
}

# 1. all_reduce by protocol; 2. the point-to-point tools.
for proto in Simple LL LL128; do perf all_reduce "$proto"; done
[ ${#nvidia_env[@]} -gt 0 ] && say "(NVIDIA's NCCL: 1 rank only: it refuses two ranks of one communicator on one GPU)"
for tool in sendrecv alltoall; do perf "$tool" default; done

# 3. the gpu suite, one test a run (exit 77: skipped, no CUDA device).
for name in one-rank threads streams errors graphs groups memalloc host-backend processes watchdog algorithms; do
  [ -x "$build/test/gpu/gpu_test" ] || { say "gpu suite: not run ($build/test/gpu/gpu_test not built: a build without CUDA)"; break; }
  step "gpu suite" "gpu-$name" "$out/gpu-suite.log" "${braid_env[@]}" NCCL_DEBUG=WARN "$build/test/gpu/gpu_test" "$name"
  [ "$status" = 77 ] && status="skipped by itself: $(grep -m1 skipped "$tmp/gpu-$name.txt")"
  [ "$status" = skipped ] || say "gpu suite: gpu-$name: $status"
  # The first tests to fail: once more with every launch's work in mapped host memory instead of
  # its parameters (kernels/launch_args.h), so that the summary tells the two apart.
  if [[ "$status" =~ ^[0-9]+$ ]] && [ "$status" != 0 ] && [ "$status" != 77 ] && { [ "$name" = one-rank ] || [ "$name" = threads ]; }; then
    step "gpu suite again" "gpu-$name-inline-off" "$out/gpu-suite.log" "${braid_env[@]}" NCCL_DEBUG=WARN \
      BRAID_INLINE_LAUNCH_ARGS=0 "$build/test/gpu/gpu_test" "$name"
    say "gpu suite: gpu-$name again with BRAID_INLINE_LAUNCH_ARGS=0: $status"
  fi
done
if [ -x "$build/test/gpu/gpu_one_sided" ]; then  # (one-sided operations: their own program)
  step "gpu suite" "gpu-one-sided" "$out/gpu-suite.log" "${braid_env[@]}" NCCL_DEBUG=WARN "$build/test/gpu/gpu_one_sided"
  [ "$status" = 77 ] && status="skipped by itself: $(grep -m1 skipped "$tmp/gpu-one-sided.txt")"
  [ "$status" = skipped ] || say "gpu suite: gpu-one-sided: $status"
  # Again with every peer over the network (TCP links): the CUDA backend's path across hosts
  # (staging on the stream, the relay's sender, the target's copy into the device window).
  step "gpu suite" "gpu-one-sided-net" "$out/gpu-suite.log" "${braid_env[@]}" NCCL_DEBUG=WARN BRAID_ONE_SIDED_NET=1 \
    "$build/test/gpu/gpu_one_sided"
  [ "$status" = 77 ] && status="skipped by itself: $(grep -m1 skipped "$tmp/gpu-one-sided-net.txt")"
  [ "$status" = skipped ] || say "gpu suite: gpu-one-sided-net (BRAID_ONE_SIDED_NET=1): $status"
fi

# 4. PyTorch with Braid preloaded, 1 then 2 ranks on the GPU.
if python3 -c 'import torch, torch.distributed' 2> /dev/null; then
  for n in 1 2; do
    step torch "torch-$n" "$out/torch.log" env LD_PRELOAD="$PWD/$build/libnccl.so.2" \
      python3 -m torch.distributed.run --standalone --nproc_per_node="$n" perf/torch_check.py
    [ "$status" = skipped ] || say "torch, $n rank(s): $status; $(grep -h -m1 'torch_check:' "$tmp/torch-$n.txt" 2> /dev/null)"
  done
else
  say "torch: not run (python3 -c 'import torch' failed)"
fi
say "total: $(elapsed) s; $failed run(s) failed or timed out"
[ "$failed" = 0 ]
