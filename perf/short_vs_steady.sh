#!/bin/bash
# Short runs against the steady state (issue 38): the figures nccl-tests' usual flags give
# (-w 1 -n 20, -w 5 -n 20) beside those of long runs, for all_reduce_perf, all_gather_perf and
# sendrecv_perf at 2, 4 and 8 ranks (processes), every size of one sweep. A short run's figure
# that pays connection setup inside its timed iterations shows as a ratio well above 1.
# Usage: perf/short_vs_steady.sh [BUILD_DIR]     (default build; about 3 min on 2 CPUs)
# RANKS="2 4 8", TOOLS="all_reduce all_gather sendrecv", MAXBYTES=2M (sizes 8 B to it, x8),
# REPEAT=5 (runs of each, medians: where other programs compete for the CPUs, a waiting rank's
# sched_yield hands its core away and a small message's figure jumps from 0.3 to 3.6 us or
# more, for a whole run, short or long alike: look for ratios that hold across repeats),
# MODE=--threads for thread ranks. Steady state: -w 500 -n 2000 up to 64 KiB, fewer iterations
# from 256 KiB (sizes 8 B x 8^k).
# Prints one line per tool, ranks and size: the median times (out-of-place and in-place, us) of
# each flag set and the worse ratio of the two columns; the last line counts ratios over 1.25.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
ranks=(${RANKS:-2 4 8})
tools=(${TOOLS:-all_reduce all_gather sendrecv})
maxbytes=${MAXBYTES:-2M}
repeat=${REPEAT:-5}
mode=${MODE:-}
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}
for t in "${tools[@]}"; do
  [ -x "$build/perf/${t}_perf" ] || { echo "build first: $build/perf/${t}_perf is missing"; exit 2; }
done
work=$(mktemp -d /tmp/braid-short-XXXXXX)
trap 'rm -rf "$work"' EXIT

# run TOOL N NAME FLAGS...: appends "size out-of-place in-place" lines to $work/TOOL.N.NAME.
run() {
  local tool=$1 n=$2 name=$3
  shift 3
  "$build/perf/${tool}_perf" $mode --ranks "$n" -f 8 "$@" 2>&1 |
    awk '$1 ~ /^[0-9]+$/ && $1 > 0 && NF >= 13 { print $1, $6, $10 }' >>"$work/$tool.$n.$name"
}

for tool in "${tools[@]}"; do
  for n in "${ranks[@]}"; do
    for ((i = 0; i < repeat; ++i)); do  # interleaved, so load drifts touch every flag set alike
      run "$tool" "$n" w1 -b 8 -e "$maxbytes" -w 1 -n 20
      run "$tool" "$n" w5 -b 8 -e "$maxbytes" -w 5 -n 20
      run "$tool" "$n" steady -b 8 -e 64K -w 500 -n 2000
      run "$tool" "$n" steady -b 256K -e "$maxbytes" -w 50 -n 200
    done
  done
done

printf "# %s ranks%s, median of %d run(s) each; times in us (out-of-place/in-place)\n" "${ranks[*]}" \
  "${mode:+ ($mode)}" "$repeat"
printf "%-10s %5s %10s %17s %17s %17s %8s %8s\n" tool ranks bytes "-w 1 -n 20" "-w 5 -n 20" "steady" "ratio w1" "ratio w5"
python3 - "$work" "${tools[@]}" -- "${ranks[@]}" <<'EOF'
import statistics, sys
work = sys.argv[1]
split = sys.argv.index("--")
tools, ranks = sys.argv[2:split], sys.argv[split + 1:]

def medians(path):
    runs = {}
    try:
        for line in open(path):
            size, oop, ip = line.split()
            runs.setdefault(int(size), []).append((float(oop), float(ip)))
    except FileNotFoundError:
        pass
    return {s: (statistics.median(v[0] for v in r), statistics.median(v[1] for v in r)) for s, r in runs.items()}

over = total = 0
worst = (0, "")
for tool in tools:
    for n in ranks:
        w1, w5, steady = (medians(f"{work}/{tool}.{n}.{k}") for k in ("w1", "w5", "steady"))
        for size in sorted(steady):
            if size not in w1 or size not in w5:
                continue
            s = steady[size]
            ratio = lambda m: max(m[0] / s[0] if s[0] > 0 else 0, m[1] / s[1] if s[1] > 0 else 0)
            r1, r5 = ratio(w1[size]), ratio(w5[size])
            pair = lambda m: f"{m[0]:.2f}/{m[1]:.2f}"
            print(f"{tool:<10} {n:>5} {size:>10} {pair(w1[size]):>17} {pair(w5[size]):>17} {pair(s):>17} "
                  f"{r1:8.2f} {r5:8.2f}")
            for r in (r1, r5):
                total += 1
                over += r > 1.25
                if r > worst[0]:
                    worst = (r, f"{tool} {n} ranks {size} B")
print(f"# {over} of {total} ratios above 1.25; the worst {worst[0]:.2f} ({worst[1]})")
EOF
