#!/bin/bash
# docs/parameters.md is what the registry says today, and names only registry parameters.
#   check_parameters_doc.sh BRAID_INFO SOURCE_ROOT
# 1. The committed page equals `braid-info --markdown` (the page is generated from
#    src/core/params_table.cc: a knob added, renamed or re-described there shows up here).
# 2. Every NCCL_*/BRAID_* name the page mentions is one braid-info lists with
#    NCCL_PARAM_DUMP_ALL=1 (the registry's knobs and the NCCL variables it recognises), or a
#    constant the installed headers define (a help text may name NCCL_PTR_CUDA). This reads
#    braid-info's plain listing, not the Markdown, so a generator that made a name up would be
#    caught.
set -u
info=$1
page=$2/docs/parameters.md
[ -f "$page" ] || { echo "FAILED: $page does not exist"; exit 1; }
fresh=$(mktemp)
trap 'rm -f "$fresh"' EXIT
if ! "$info" --markdown >"$fresh"; then
  echo "FAILED: $info --markdown did not run"
  exit 1
fi
if ! diff -u "$page" "$fresh"; then
  echo "FAILED: docs/parameters.md differs from the registry (above: - the page, + the registry). Write it again with"
  echo "  build/src/braid-info --markdown > docs/parameters.md"
  exit 1
fi
known=$(env -u NCCL_CONF_FILE HOME=/nonexistent NCCL_PARAM_DUMP_ALL=1 "$info" |
        awk '/^(NCCL|BRAID)_[A-Z0-9_]* +=/ { print $1 }' | sort -u)
mentioned=$(grep -oE '\b(NCCL|BRAID)_[A-Z0-9_]*[A-Z0-9]' "$page" | sort -u)
unknown=$(comm -23 <(echo "$mentioned") <(echo "$known") | while read -r name; do
  grep -qE "^[[:space:]]*#[[:space:]]*define[[:space:]]+$name\b|^[[:space:]]*$name[[:space:]]*(=|,)" "$2"/include/*.h || echo "$name"
done)
if [ -n "$unknown" ]; then
  echo "FAILED: docs/parameters.md names variables the registry does not have:"
  echo "$unknown"
  exit 1
fi
echo "parameters page: equals the registry's, and its $(echo "$mentioned" | wc -l) names are all the registry's or the headers'"
