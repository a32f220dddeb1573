#!/bin/bash
# Plots the tuner's predicted bus bandwidth against size, one line per algorithm, for one
# collective, from `braid-topo --tuning` (the arguments after the options go to braid-topo).
# Needs gnuplot (Debian: apt-get install gnuplot-nox).
# Usage: perf/plot_tuning.sh [-b BUILD_DIR] [-c COLLECTIVE] [-o FILE.png] [braid-topo arguments...]
#   e.g. perf/plot_tuning.sh -o h100.png --no-detect --topo-file ../shared/topologies/ibm-cloud-gx3d-160x1792x8h100-topo.xml
set -euo pipefail
cd "$(dirname "$0")/.."
build=build coll=AllReduce out=tuning.png
while [ $# -gt 1 ]; do
  case $1 in
    -b) build=$2 ;;
    -c) coll=$2 ;;
    -o) out=$2 ;;
    *) break ;;
  esac
  shift 2
done
command -v gnuplot >/dev/null || { echo "needs gnuplot: apt-get install gnuplot-nox"; exit 2; }
topo="$build/src/braid-topo"
[ -x "$topo" ] || { echo "build first: $topo is missing"; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$topo" --tuning "$@" > "$work/tuning.txt"
# The collective's table: a header naming the algorithm columns, then one row per size
# ("8 B", "16 KiB", ...), columns: size unit algorithm proto ch time busbw, then per algorithm
# (the header's names follow "size algorithm proto ch time (us) busbw GB/s").
awk -v coll="$coll" '
  $1 == coll && $2 == "on" { inside = 1; ranks = $3; next }
  inside && $1 == "size" { n = 0; for (i = 9; i <= NF; ++i) names[++n] = $i; print "# size", n, ranks; for (i = 1; i <= n; ++i) print "# name", names[i]; next }
  inside && NF == 0 { inside = 0 }
  inside && $1 ~ /^[0-9]+$/ && $3 !~ /^\(/ {
    scale = $2 == "KiB" ? 1024 : $2 == "MiB" ? 1048576 : $2 == "GiB" ? 1073741824 : 1
    line = $1 * scale
    for (i = 8; i <= NF; ++i) line = line " " ($i == "-" ? "NaN" : $i)
    print line
  }' "$work/tuning.txt" > "$work/data.txt"
mapfile -t names < <(awk '$2 == "name" { print $3 }' "$work/data.txt")
[ ${#names[@]} -gt 0 ] || { echo "no $coll table in braid-topo's output"; exit 1; }
ranks=$(awk '$2 == "size" { print $4; exit }' "$work/data.txt")
plots=()
for i in "${!names[@]}"; do plots+=("'$work/data.txt' using 1:$((i + 2)) with linespoints title '${names[$i]}'"); done
gnuplot <<EOF
set terminal png size 1000,650
set output '$out'
set title "Braid's predicted $coll bus bandwidth, $ranks ranks"
set logscale x 2
set logscale y 10
set format x "2^{%L}"
set xlabel 'size (bytes)'
set ylabel 'bus bandwidth (GB/s)'
set key left top
set grid
plot $(IFS=,; echo "${plots[*]}")
EOF
echo "wrote $out"
