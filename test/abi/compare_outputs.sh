#!/bin/bash
# Usage: compare_outputs.sh REFERENCE_PROGRAM CANDIDATE_PROGRAM
# Runs both and fails with a diff unless they print exactly the same thing.
# A reference program of "-" means NVIDIA's header was not found: the test is skipped.
set -u
if [ "$1" = "-" ]; then
  echo "SKIP: the CUDA runtime headers (/usr/local/cuda/include) that NVIDIA's nccl.h includes are not installed; nothing to compare with"
  exit 77
fi
ref=$("$1") || { echo "reference program $1 failed"; exit 1; }
cand=$("$2") || { echo "candidate program $2 failed"; exit 1; }
if [ "$ref" != "$cand" ]; then
  echo "ABI facts differ (< NVIDIA, > Braid):"
  diff <(echo "$ref") <(echo "$cand")
  exit 1
fi
echo "identical: $(echo "$ref" | wc -l) facts"
