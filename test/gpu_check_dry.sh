#!/bin/bash
# The GPU check's dry run (perf/gpu-check.sh without a GPU): a fake nvidia-smi on PATH, a fake
# NVIDIA NCCL package (Braid's own library under nvidia/nccl/lib) and a fake torch on
# PYTHONPATH, so that the whole script runs here: the tools found, the perf tools on the host
# backend (8 B to 64 KiB), NVIDIA's library taken by LD_LIBRARY_PATH and the ratio tables
# printed, one kind made to hang (alltoall: its first run times out, the second is skipped), the
# gpu suite and the torch step, the files under $OUT. Then checks what it wrote.
#
#   test/gpu_check_dry.sh BUILD            # BUILD as it is (CI: the suite's own build)
#   test/gpu_check_dry.sh BUILD --build    # meson setup and the build too (BUILD new: with CUDA
#                                          # where nvcc is, the check's own kernel filter)
set -uo pipefail
[ $# -ge 1 ] || { echo "usage: $0 BUILD [--build]"; exit 2; }
build=$(realpath -m "$1")
src=$(cd "$(dirname "$0")/.." && pwd)
mode=skip
[ "${2:-}" = --build ] && mode=build
fake=$(mktemp -d)
trap 'rm -rf "$fake"' EXIT

mkdir -p "$fake/bin" "$fake/py/nvidia/nccl/lib" "$fake/py/torch/distributed" "$fake/out"
cat > "$fake/bin/nvidia-smi" <<'EOF'
#!/bin/sh
echo "NVIDIA H200 (fake nvidia-smi: dry run), 580.00, 143771 MiB"
EOF
chmod +x "$fake/bin/nvidia-smi"
touch "$fake/py/nvidia/nccl/__init__.py" "$fake/py/torch/__init__.py" "$fake/py/torch/distributed/__init__.py"
cat > "$fake/py/torch/distributed/run.py" <<'EOF'
import sys
ranks = [a.split("=", 1)[1] for a in sys.argv if a.startswith("--nproc_per_node=")]
print("torch_check: fake torch (dry run), %s rank(s), script %s" % (ranks[0] if ranks else "?", sys.argv[-1]))
EOF

# The build's library stands in for NVIDIA's (a link made now, valid once the build made it:
# the script looks for it after the build).
ln -s "$build/libnccl.so.2" "$fake/py/nvidia/nccl/lib/libnccl.so.2"

started=$(date +%s)
OUT="$fake/out" PATH="$fake/bin:$PATH" PYTHONPATH="$fake/py${PYTHONPATH:+:$PYTHONPATH}" \
  BRAID_GPU_BUILD="$build" BRAID_GPU_CHECK_BUILD=$mode BRAID_GPU_CHECK_JOBS=2 BRAID_GPU_CHECK_MAX=64K \
  BRAID_GPU_CHECK_ITERS=2 BRAID_GPU_CHECK_RUN_SECONDS=15 BRAID_GPU_CHECK_SECONDS=${BRAID_GPU_CHECK_SECONDS:-3000} \
  BRAID_GPU_CHECK_STALL="braid alltoall" "$src/perf/gpu-check.sh" > "$fake/stdout" 2>&1
rc=$?
echo "=== perf/gpu-check.sh (dry run): exit status $rc after $(( $(date +%s) - started )) s; its standard output:"
cat "$fake/stdout"

fails=0
expect() {  # expect WHAT PATTERN FILE: the extended regex occurs in FILE
  if grep -Eq -- "$2" "$3"; then echo "ok: $1"; else echo "FAILED: $1 (no /$2/ in $(basename "$3"))"; fails=$((fails + 1)); fi
}
summary="$fake/out/summary.txt"
for proto in Simple LL LL128; do
  for ranks in 1 2; do
    expect "braid all_reduce $ranks rank(s) $proto: a table" "^braid all_reduce, $ranks rank\(s\), NCCL_PROTO=$proto: 0; 8 B .* us \.\. 65536 B" "$summary"
  done
  expect "nvidia all_reduce $proto: a table" "^nvidia all_reduce, 1 rank, NCCL_PROTO=$proto: 0; 8 B" "$summary"
  expect "ratios for all_reduce $proto" "^## all_reduce, 1 rank, NCCL_PROTO=$proto: Braid against" "$fake/out/compare.txt"
done
expect "NVIDIA's library by LD_LIBRARY_PATH" "NVIDIA's NCCL .*first on LD_LIBRARY_PATH" "$summary"
expect "a ratio for 65536 bytes" "^ +65536 +[0-9.]+ +[0-9.]+ +[0-9]+\.[0-9][0-9] " "$fake/out/compare.txt"
expect "sendrecv after all_reduce" "^braid sendrecv, 2 rank\(s\), NCCL_PROTO=default: 0;" "$summary"
expect "the stalled kind timed out" "^braid alltoall, 1 rank\(s\), NCCL_PROTO=default: timed out after 15 s" "$summary"
expect "and the rest of it was skipped" "^braid-alltoall-default-2: not run \(braid-alltoall-default-1 timed out" "$summary"
expect "NVIDIA's alltoall not skipped (another kind)" "^nvidia alltoall, 1 rank, NCCL_PROTO=default: 0;" "$summary"
expect "the gpu suite step" "^gpu suite: " "$summary"
expect "the torch step" "^torch, 2 rank\(s\): 0; torch_check: fake torch \(dry run\), 2 rank" "$summary"
expect "the total, one failure (the stall)" "^total: [0-9]+ s; 1 run\(s\) failed or timed out" "$summary"
# In order: all_reduce, then sendrecv and alltoall, the gpu suite, torch.
order=$(grep -E '^(braid all_reduce,|braid sendrecv,|braid alltoall,|gpu suite:|torch,)' "$summary" | awk -F'[:,]' '{print $1}' | uniq | tr '\n' '|')
if [ "$order" = "braid all_reduce|braid sendrecv|braid alltoall|gpu suite|torch|" ]; then
  echo "ok: the runs in order"
else
  echo "FAILED: the runs in order (got $order)"; fails=$((fails + 1))
fi
# Appended as each run ends: Braid's log holds every Braid run, NVIDIA's every NVIDIA run.
[ "$(grep -c '^### braid-.*exit status' "$fake/out/perf.log")" = 9 ] && echo "ok: perf.log holds the 9 braid runs" ||
  { echo "FAILED: perf.log holds $(grep -c '^### braid-.*exit status' "$fake/out/perf.log") braid runs, not 9"; fails=$((fails + 1)); }
files=$(find "$fake/out" -type f | wc -l)
[ "$files" -le 8 ] && echo "ok: $files files under \$OUT (the device tool brings back 8)" ||
  { echo "FAILED: $files files under \$OUT, more than 8"; fails=$((fails + 1)); }
[ "$rc" = 1 ] && echo "ok: exit status 1 (the stalled run)" || { echo "FAILED: exit status $rc, not 1"; fails=$((fails + 1)); }
echo "=== $fails check(s) failed"
[ "$fails" = 0 ]
