#!/bin/bash
# The whole test suite, as CI runs it: build, every meson test suite, the PTX report of the
# GPU's data loops (perf/ptx_report.sh, where nvcc is), then the unit suite and integration
# suites again under AddressSanitizer + UndefinedBehaviorSanitizer, then a
# short run of every libFuzzer target (clang; skipped with the reason when clang is absent).
# Prints each stage's time and a closing line "N passed, N failed, N skipped". A test that fails is
# run once more: a repeated failure fails the run; a test that then passes is listed as FLAKY
# with its first failure's report, which is also printed again at the end of the output.
# Build folders: $BRAID_BUILD (default build), $BRAID_BUILD_SAN (default build-san) and
# $BRAID_BUILD_FUZZ (default build-fuzz); $BRAID_FUZZ_SECONDS per target (default 10).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/cuda/bin:$PATH"
build=${BRAID_BUILD:-build}
build_san=${BRAID_BUILD_SAN:-build-san}
build_fuzz=${BRAID_BUILD_FUZZ:-build-fuzz}
fuzz_seconds=${BRAID_FUZZ_SECONDS:-10}
jobs=${BRAID_JOBS:-2}

passed=0 failed=0 skipped=0
stage_start=0
begin() { stage_start=$(date +%s); echo "=== stage: $1"; }
end() { echo "=== stage $1 took $(( $(date +%s) - stage_start )) s"; }

# Adds the counts of one meson test run (from its JSON log) to the totals.
count() {
  local log="$1/meson-logs/testlog.json"
  [ -f "$log" ] || return 0
  passed=$((passed + $(grep -c '"result": "OK"' "$log" || true)))
  failed=$((failed + $(grep -cE '"result": "(FAIL|TIMEOUT|ERROR|UNEXPECTEDPASS)"' "$log" || true)))
  skipped=$((skipped + $(grep -c '"result": "SKIP"' "$log" || true)))
}

# Failed tests of the last meson run in build folder $1, one name a line.
failed_names() {
  python3 -c 'import json, sys
for line in open(sys.argv[1]):
    t = json.loads(line)
    if t["result"] in ("FAIL", "TIMEOUT", "ERROR", "UNEXPECTEDPASS"): print(t["name"].split(" / ")[-1])' \
    "$1/meson-logs/testlog.json"
}

# The Catch2 failures in the last meson run's log of build folder $1 (bounded: the INFO
# texts of process tests can be long), kept to be printed again after the last stage.
failures=""
keep_failures() {
  failures+="--- $1: $(grep -B6 -A14 -m 6 -E 'FAILED:|failed with|timed out' "$1/meson-logs/testlog.txt" | head -n 120)"$'\n'
}

# meson test in build folder $1 with the arguments after it. A test that fails is run once
# more on its own: a failure that repeats fails the stage; one that does not is counted as
# passed and reported as FLAKY (with its first failure's text) at the end, never silently.
flaky=""
run_tests() {
  local dir=$1
  shift
  if meson test -C "$dir" "$@"; then
    count "$dir"
    return 0
  fi
  keep_failures "$dir"
  local names
  names=$(failed_names "$dir")
  passed=$((passed + $(grep -c '"result": "OK"' "$dir/meson-logs/testlog.json" || true)))
  skipped=$((skipped + $(grep -c '"result": "SKIP"' "$dir/meson-logs/testlog.json" || true)))
  [ -n "$names" ] || { failed=$((failed + 1)); return 1; }
  echo "=== running again, once, what failed in $dir: $names"
  # shellcheck disable=SC2086 # one test name a word
  if meson test -C "$dir" --no-rebuild --print-errorlogs $names; then
    flaky+="$dir: $names"$'\n'
    count "$dir"
    return 0
  fi
  keep_failures "$dir"
  count "$dir"
  return 1
}

status=0
begin build
# Every host kernel (the sweeps need them all); the nvcc units (the CUDA backend's kernels,
# linked into the library but never launched here: CI has no GPU, and the gpu suite skips),
# the slowest part of the build, on every op of float and the sum of the types with their own
# arithmetic (half, bfloat16, fp8, double): the integers' code is the same template as float's.
[ -f "$build/build.ninja" ] || meson setup "$build" --buildtype=debugoptimized \
  -Dcuda-only-funcs='*:f32,sum:f16,sum:bf16,sum:f8e5m2,sum:f64'
meson compile -C "$build" -j "$jobs"
end build

begin tests
run_tests "$build" --print-errorlogs --num-processes "$jobs" || status=1
end tests

begin ptx
# The GPU's data loops read from their PTX (16-byte accesses, loads in flight, paired 16-bit
# arithmetic, no spills), the steps' system-scope releases and fences (at most one a step, none
# a line) and ptxas's figures for this build's kernels: where nvcc is.
# A report's exit status counted as a test's (77: skipped, e.g. without nvcc).
ptx_run() {
  local ptx_status=0
  "$@" || ptx_status=$?
  if [ "$ptx_status" = 0 ]; then
    passed=$((passed + 1))
  elif [ "$ptx_status" = 77 ]; then
    skipped=$((skipped + 1))
  else
    failed=$((failed + 1))
    status=1
  fi
}
ptx_run perf/ptx_report.sh "$build"
# The loops over pointers that differ modulo 16 (8-, 4- and 2-byte packs, loads in flight),
# half/bfloat16 Max/Min and the line protocols' 16-bit elements in hardware instructions.
ptx_run perf/ptx_pack_report.sh
end ptx

begin sanitizers
# Only the kernels the non-sweep tests call (the sweeps run in the normal build): float with
# sum, max and min, int32 and double sums. Built by clang where it is installed: on 2 CPUs it
# compiled this build in about half of g++'s 1364 CPU-seconds (CI's longest stage), and its
# UBSan also checks enum loads; g++ otherwise.
san_funcs='sum:f32,max:f32,min:f32,sum:i32,sum:f64'
san_compilers=()
if command -v clang >/dev/null && command -v clang++ >/dev/null; then san_compilers=(CC=clang CXX=clang++); fi
[ -f "$build_san/build.ninja" ] || env "${san_compilers[@]}" meson setup "$build_san" --buildtype=debugoptimized \
  -Doptimization=1 -Db_sanitize=address,undefined -Db_lundef=false -Dcuda=disabled -Donly_funcs="$san_funcs"
meson compile -C "$build_san" -j "$jobs"
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=1 \
  run_tests "$build_san" --suite unit --suite integration --print-errorlogs --no-rebuild || status=1
end sanitizers

begin fuzz
have_libfuzzer() {
  echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }' |
    clang++ -x c++ -fsanitize=fuzzer - -o "${TMPDIR:-/tmp}/braid-libfuzzer-probe" 2>/dev/null &&
    rm -f "${TMPDIR:-/tmp}/braid-libfuzzer-probe"
}
if command -v clang >/dev/null && command -v clang++ >/dev/null && have_libfuzzer; then
  [ -f "$build_fuzz/build.ninja" ] || CC=clang CXX=clang++ meson setup "$build_fuzz" --buildtype=debugoptimized \
    -Dfuzz=true -Dcuda=disabled -Donly_funcs='sum:f32' -Dcpp_args=-fsanitize=fuzzer-no-link \
    -Db_sanitize=address,undefined -Db_lundef=false
  meson configure "$build_fuzz" -Dfuzz_seconds="$fuzz_seconds"
  meson compile -C "$build_fuzz" -j "$jobs" test/fuzz_topology_xml test/fuzz_graph_xml test/fuzz_env_parsers test/fuzz_bootstrap \
    test/fuzz_descriptor test/fuzz_fd_request test/fuzz_net_socket
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    run_tests "$build_fuzz" --suite fuzz --print-errorlogs --no-rebuild || status=1
else
  echo "fuzz: skipped: clang with libFuzzer is not installed (Debian: apt-get install clang libclang-rt-14-dev)"
  skipped=$((skipped + 4))
fi
end fuzz

if [ -n "$failures" ]; then
  echo "=== failures, again (the first lines of each failed run's Catch2 report)"
  printf '%s' "$failures"
fi
[ -z "$flaky" ] || printf 'FLAKY (failed once, passed when run again):\n%s' "$flaky"
echo "tests: $passed passed, $failed failed, $skipped skipped"
exit $status
