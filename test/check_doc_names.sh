#!/bin/bash
# Every NCCL_*/BRAID_* name the README and docs/*.md mention still exists, so that a renamed or
# removed variable, or a misspelt one, does not linger in the manual.
#   check_doc_names.sh BRAID_INFO SOURCE_ROOT
# A name passes when braid-info lists it with NCCL_PARAM_DUMP_ALL=1 (the registry's knobs and
# the NCCL variables it recognises), or it is a word of the code (a header's constant, a macro,
# a variable a script in perf/ or test/ reads), or the page writes it as a prefix (NCCL_IB_*).
set -u
info=$(realpath "$1")  # (the folder changes below)
root=$2
cd "$root" || { echo "FAILED: cannot enter $root"; exit 1; }
known=$(env -u NCCL_CONF_FILE HOME=/nonexistent NCCL_PARAM_DUMP_ALL=1 "$info" |
        awk '/^(NCCL|BRAID)_[A-Z0-9_]* +=/ { print $1 }' | sort -u)
[ -n "$known" ] || { echo "FAILED: $info listed no parameters"; exit 1; }
bad=0 checked=0
for page in README.md docs/*.md; do
  # Names written as a prefix ("NCCL_IB_*") are left out.
  for name in $(sed 's/\b\(NCCL\|BRAID\)_[A-Z0-9_]*_\*//g' "$page" | grep -oE '\b(NCCL|BRAID)_[A-Z0-9_]*[A-Z0-9]' | sort -u); do
    checked=$((checked + 1))
    grep -qxF "$name" <<<"$known" && continue
    grep -rqw --include='*.h' --include='*.c' --include='*.cc' --include='*.cu' --include='*.sh' --include='*.py' \
      -- "$name" include src kernels transport topology perf test && continue
    echo "$page: $name is neither a parameter braid-info lists nor a word of the code"
    bad=$((bad + 1))
  done
done
[ "$bad" -eq 0 ] || { echo "FAILED: $bad names above"; exit 1; }
echo "variable names: the $checked NCCL_*/BRAID_* names of README.md and docs/*.md exist (per page)"
