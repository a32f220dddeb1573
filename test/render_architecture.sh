#!/bin/bash
# The architecture picture (docs/architecture.dot) renders with Graphviz, and the committed
# docs/architecture.svg is that rendering's: same nodes (a re-rendering may differ in layout
# details between Graphviz versions, so the node titles are compared, not the bytes).
#   render_architecture.sh SOURCE_ROOT
# Exits 77 (skipped) without `dot`.
set -u
root=$1
command -v dot >/dev/null || { echo "SKIP: Graphviz's dot is not installed"; exit 77; }
fresh=$(mktemp)
trap 'rm -f "$fresh"' EXIT
if ! dot -Tsvg "$root/docs/architecture.dot" -o "$fresh"; then
  echo "FAILED: docs/architecture.dot does not render"
  exit 1
fi
titles() { grep -o '<title>[^<]*</title>' "$1" | sort; }
if [ "$(titles "$fresh")" != "$(titles "$root/docs/architecture.svg")" ]; then
  echo "FAILED: docs/architecture.svg is out of date: render it again with"
  echo "  dot -Tsvg docs/architecture.dot -o docs/architecture.svg"
  diff <(titles "$root/docs/architecture.svg") <(titles "$fresh")
  exit 1
fi
echo "architecture picture: renders, and docs/architecture.svg has its $(titles "$fresh" | wc -l) nodes and edges"
