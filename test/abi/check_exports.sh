#!/bin/bash
# Usage: check_exports.sh LIBNCCL_SO EXPORTS_FILE [MORE_EXPORTS_FILE]
# (MORE_EXPORTS_FILE: the 2.30 names exported so far, until EXPORTS_FILE is 2.30.7's list)
# Fails unless the library exports exactly the names of EXPORTS_FILE, every nccl name
# with a pnccl twin is a weak alias of it, the SONAME is libnccl.so.2, and the NEEDED
# entries stay within NVIDIA's set.
set -u
lib=$1
expected=$2
status=0

symbols=$(nm -D --defined-only "$lib")
ours=$(echo "$symbols" | awk '{print $3}' | sort -u)
want=$(sort -u "$expected" ${3:+"$3"})
if [ "$ours" != "$want" ]; then
  echo "exported names differ (< expected, > exported):"
  diff <(echo "$want") <(echo "$ours")
  status=1
else
  echo "exports: $(echo "$ours" | wc -l) names, exactly the expected set ($(basename "$expected")${3:+ and $(basename "$3")})"
fi

# Symbol kinds: pnccl* strong (T) at the same address as their weak (W) nccl* twins.
problems=$(echo "$symbols" | awk '
  { addr[$3] = $1; kind[$3] = $2 }
  END {
    for (name in kind) {
      if (name !~ /^pnccl/) continue
      twin = substr(name, 2)
      if (kind[name] != "T") print name " should be a strong definition (T), is " kind[name]
      if (kind[twin] != "W") print twin " should be a weak alias (W), is \"" kind[twin] "\""
      if (addr[twin] != addr[name]) print twin " is not an alias of " name
    }
  }')
if [ -n "$problems" ]; then echo "$problems"; status=1; else echo "weak aliases: every nccl* twin aliases its pnccl*"; fi

soname=$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = "libnccl.so.2" ] || { echo "SONAME is '$soname', expected libnccl.so.2"; status=1; }

# NVIDIA's libnccl.so.2 2.28.9 itself lists exactly these (readelf -d), the dynamic loader included.
allowed=" libc.so.6 libm.so.6 libdl.so.2 librt.so.1 libpthread.so.0 libstdc++.so.6 libgcc_s.so.1 ld-linux-x86-64.so.2 "
needed=$(readelf -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
for n in $needed; do
  case "$allowed" in
    *" $n "*) ;;
    *) echo "NEEDED $n is outside NVIDIA's set:$allowed"; status=1 ;;
  esac
done
echo "SONAME: $soname; NEEDED: $(echo $needed)"
exit $status
