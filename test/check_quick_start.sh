#!/bin/bash
# The README's Quick start shows the commands CI runs, so they keep working.
#   check_quick_start.sh SOURCE_ROOT
# The Quick start has two one-line sh blocks: set up and benchmark, then the tests.
# - The tests' command is a line of .ci/run, word for word.
# - The first is split at "&&": every package its apt-get installs is in .ci/run's list;
#   "meson setup build" and "meson compile -C build" are what test/run_all.sh does in its
#   default build folder "build"; the benchmark (the last part) is a line of .ci/run, which runs
#   it in that folder after the tests.
set -u
root=$1
readme=$root/README.md ci=$root/.ci/run run_all=$root/test/run_all.sh
# The first two ```sh blocks after the "## Quick start" heading, one line each.
mapfile -t commands < <(awk '
  /^## / { inside = ($0 == "## Quick start") }
  inside && /^```sh$/ { fenced = 1; next }
  inside && fenced && /^```$/ { fenced = 0; next }
  inside && fenced { print }' "$readme" | head -n 2)
if [ ${#commands[@]} -ne 2 ]; then
  echo "FAILED: README.md's Quick start should have two one-line sh blocks (found ${#commands[@]} lines)"
  exit 1
fi
bad=0
fail() { echo "FAILED: $*"; bad=1; }
ci_has_line() { grep -qxF -- "$1" "$ci"; }

ci_has_line "${commands[1]}" || fail "the test command '${commands[1]}' is not a line of .ci/run"

ci_packages=$(sed -n '/^packages=(/,/)/p' "$ci" | tr -d '()' | sed 's/packages=//' | tr -s ' \n' '\n')
parts=()
rest=${commands[0]}
while [[ $rest == *" && "* ]]; do
  parts+=("${rest%% && *}")
  rest=${rest#* && }
done
parts+=("$rest")
last=$((${#parts[@]} - 1))
for i in "${!parts[@]}"; do
  part=${parts[$i]}
  case "$part" in
    "apt-get update") ;;
    "apt-get install -y "*)
      for p in ${part#apt-get install -y }; do
        grep -qxF -- "$p" <<<"$ci_packages" || fail "the Quick start installs $p, which .ci/run does not"
      done ;;
    "meson setup build")
      grep -qF 'build=${BRAID_BUILD:-build}' "$run_all" && grep -qF 'meson setup "$build"' "$run_all" ||
        fail "test/run_all.sh no longer runs 'meson setup' in the folder build" ;;
    "meson compile -C build")
      grep -qF 'meson compile -C "$build"' "$run_all" || fail "test/run_all.sh no longer compiles the folder build" ;;
    *)
      if [ "$i" -eq "$last" ]; then
        ci_has_line "$part" || fail "the benchmark '$part' is not a line of .ci/run"
      else
        fail "the Quick start's step '$part' is not one CI runs"
      fi ;;
  esac
done
[ "$bad" -eq 0 ] || exit 1
echo "quick start: both commands are what .ci/run runs (${#parts[@]} steps and the test command)"
