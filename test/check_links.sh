#!/bin/bash
# Usage: check_links.sh [REPO_ROOT]
# Fails (exit 1, listing each one as FILE:LINE: TARGET) unless every relative link of README.md
# and docs/*.md leads to a file or folder that exists, and every #anchor into a Markdown page
# (this one's, or another's: page.md#anchor) to one of its headings. Links are Markdown's
# [text](target), ![alt](target) and reference definitions "[name]: target"; web and mail
# addresses are not checked. Anchors are GitHub's: the heading in lower case, without
# punctuation, spaces as '-', a repeated heading's anchor followed by -1, -2...
# Text in code (fenced blocks and `spans`) is not a link.
set -u
root=${1:-"$(dirname "$0")/.."}
cd "$root" || { echo "check_links.sh: cannot enter $root"; exit 1; }

# The anchors of Markdown page $1, one a line.
anchors() {
  awk '/^[ \t]*(```|~~~)/ { fenced = !fenced; next }
    !fenced && /^#+ / {
      h = $0
      sub(/^#+ +/, "", h)
      h = tolower(h)
      gsub(/[^a-z0-9 _-]/, "", h)
      gsub(/ /, "-", h)
      n = seen[h]++
      print (n ? h "-" n : h)
    }' "$1"
}

pages=(README.md docs/*.md)
broken=0 checked=0
for page in "${pages[@]}"; do
  [ -f "$page" ] || continue
  dir=$(dirname "$page")
  # One "LINE<TAB>TARGET" per link: fenced blocks skipped, code spans removed, then the
  # targets of inline links and of reference definitions.
  while IFS=$'\t' read -r line target; do
    [ -n "$target" ] || continue
    case "$target" in
      http://* | https://* | mailto:* | ftp://*) continue ;;
    esac
    path=${target%%#*}
    path=${path%%\?*}
    checked=$((checked + 1))
    if [ -n "$path" ] && [ ! -e "$dir/$path" ]; then
      echo "$page:$line: $target"
      broken=$((broken + 1))
      continue
    fi
    [[ $target == *'#'* ]] || continue
    anchor=${target#*#}
    file=$page
    [ -z "$path" ] || file=$dir/$path
    case "$file" in *.md) ;; *) continue ;; esac
    if ! anchors "$file" | grep -qxF -- "$anchor"; then
      echo "$page:$line: $target (no such heading in $file)"
      broken=$((broken + 1))
    fi
  done < <(awk '
    /^[ \t]*(```|~~~)/ { fenced = !fenced; next }
    fenced { next }
    {
      text = $0
      gsub(/`[^`]*`/, "", text)
      if (match(text, /^[ \t]*\[[^]]+\]:[ \t]+[^ \t]+/)) {
        def = substr(text, RSTART, RLENGTH)
        sub(/^[ \t]*\[[^]]+\]:[ \t]+/, "", def)
        gsub(/^<|>$/, "", def)
        print NR "\t" def
        next
      }
      while (match(text, /\]\([^)]*\)/)) {
        target = substr(text, RSTART + 2, RLENGTH - 3)
        text = substr(text, RSTART + RLENGTH)
        sub(/^[ \t]+/, "", target)
        sub(/[ \t].*$/, "", target)   # an optional "title" after the target
        gsub(/^<|>$/, "", target)
        print NR "\t" target
      }
    }' "$page")
done

if [ "$broken" -gt 0 ]; then
  echo "$broken of $checked relative links are broken (the paths or headings above do not exist)"
  exit 1
fi
echo "links: all $checked relative links of README.md and docs/*.md resolve (files and anchors)"
