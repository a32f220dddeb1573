#!/bin/sh
# Runs one libFuzzer target for a bounded time: run_fuzz.sh FUZZER SECONDS WORKDIR SEEDDIR [MAXLEN]
# MAXLEN (default 65536) is the largest input tried: a target whose parser takes larger inputs
# passes its own cap (the topology XML's 16 MiB), so that what only shows on large inputs, a
# check quadratic in the number of attributes say, is not hidden; -timeout catches it there.
# New inputs go to WORKDIR/corpus (the seeds stay untouched), crashes to WORKDIR/crash-*.
# A crash fails the test. Add the crashing input to SEEDDIR: every seed runs first, every time,
# so it stays a regression test.
set -eu
fuzzer=$1 seconds=$2 work=$3 seeds=$4 maxlen=${5:-65536}
mkdir -p "$work/corpus"
exec "$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len="$maxlen" \
  -artifact_prefix="$work/" -print_final_stats=1 "$work/corpus" "$seeds"
