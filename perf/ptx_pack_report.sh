#!/bin/bash
# The misaligned-pack and 16-bit-float PTX report: compiles perf/ptx_pack_probe.cu (one kernel
# per reduce loop of kernels/reduce_copy.h for a type and an op, and per element of the line
# protocols' arithmetic) for sm_90 and prints, for each loop, its global loads by width, the
# longest run of loads of each width below 16 bytes with no store between them (the loads a
# thread has in flight in a pass over pointers that differ modulo 16), its paired 16-bit
# instructions, and its length in PTX instructions.
#
# Fails (exit 1) when a loop reads pointers that differ modulo 16 with fewer than 4 loads in
# flight in its 8-, 4- or 2-byte packs, when half or bfloat16 Max/Min lose their max/min
# .f16x2/.bf16x2 instructions, or when an element of the line protocols computes a 16-bit float
# without the hardware's instruction. Skips (exit 77, with the reason) where nvcc is absent.
# Needs nothing but nvcc and python3; writes only to a temporary folder.
#
#   perf/ptx_pack_report.sh [SOURCE_ROOT]    (default: this checkout; another tree's kernels/
#                                             gives its figures, e.g. an older commit's)
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
root=${1:-$here}
export PATH="/usr/local/cuda/bin:$PATH"
if ! command -v nvcc > /dev/null; then
  echo "ptx_pack_report: skipped: nvcc is not installed (on PATH or at /usr/local/cuda/bin)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
nvcc -std=c++20 --expt-relaxed-constexpr -arch=sm_90 -I"$root" -ptx "$here/perf/ptx_pack_probe.cu" -o "$tmp/probe.ptx"

python3 - "$tmp/probe.ptx" <<'PY'
import re, subprocess, sys

ptx = open(sys.argv[1]).read()
bodies = {}
for m in re.finditer(r'^(?:\.visible |\.weak )?\.(?:entry|func)\s+(?:\([^)]*\)\s*)?(\w+)\(.*?^\{(.*?)^\}', ptx, re.S | re.M):
    bodies[m.group(1)] = m.group(2)
names = sorted(bodies)
pretty = dict(zip(names, subprocess.run(["c++filt"], input="\n".join(names), capture_output=True,
                                        text=True).stdout.split("\n")))

ACCESS = re.compile(r'^\s*(ld|st)\.global((?:\.[a-z]+)*?)(?:\.(v2|v4))?\.([a-z]+)(8|16|32|64)\s', re.M)
INSTRUCTION = re.compile(r'^\s*(?:@%p\d+\s+)?[a-z]+[.a-z0-9]*\s', re.M)
PAIRED = re.compile(r'\b((?:add|mul)\.rn|max|min)\.(f16x2|bf16x2)\b')

def accesses(body):
    """[(kind, bytes)] in program order."""
    return [(k, (int(bits) // 8) * (2 if vec == "v2" else 4 if vec == "v4" else 1))
            for k, _, vec, _, bits in ACCESS.findall(body)]

def in_flight(body, width):
    """The longest run of `width`-byte loads with no global store between them."""
    best = run = 0
    for kind, size in accesses(body):
        if kind == "st":
            run = 0
        elif size == width:
            run += 1
            best = max(best, run)
    return best

def loop_body(kernel, func):
    """The reduce loop called by a probe kernel: reduceCopyStrided<T, func<T>>."""
    for n in names:
        p = pretty[n]
        if p.startswith("void braid::kernels::reduceCopyStrided<") and ("::%s<" % func) in p and kernel in p:
            return bodies[n]
    return None

LOOPS = [("sum_f32", "float", "FuncSum"), ("sum_f64", "double", "FuncSum"), ("sum_u8", "unsigned char", "FuncSum"),
         ("sum_f16", "braid::kernels::Half", "FuncSum"), ("max_f16", "braid::kernels::Half", "FuncMax"),
         ("min_f16", "braid::kernels::Half", "FuncMin"), ("max_bf16", "braid::kernels::BFloat16", "FuncMax"),
         ("min_bf16", "braid::kernels::BFloat16", "FuncMin")]
SIZES = {"f32": 4, "f64": 8, "u8": 1, "f16": 2, "bf16": 2}
failures = []
print("%-22s %s   %-26s %-28s %6s" % ("reduce loop", "loads by width 16/8/4/2/1 B", "in flight at 8/4/2/1 B",
                                       "paired 16-bit ops", "instrs"))
for label, tname, func in LOOPS:
    body = loop_body("reduceCopyStrided<%s, braid::kernels::%s<%s>" % (tname, func, tname), func)
    if body is None:
        failures.append("%s: reduceCopyStrided is missing from the probe's PTX" % label)
        continue
    loads = [sum(1 for k, s in accesses(body) if k == "ld" and s == w) for w in (16, 8, 4, 2, 1)]
    flight = {w: in_flight(body, w) for w in (8, 4, 2, 1)}
    ops = sorted(set("%s.%s" % (op, t) for op, t in PAIRED.findall(body)))
    count = len(INSTRUCTION.findall(body))
    elem = SIZES[label.split("_")[1]]
    print("%-22s %-29s %-26s %-28s %6d" % (label, "/".join(map(str, loads)),
                                         "/".join(str(flight[w]) if w >= elem else "-" for w in (8, 4, 2, 1)),
                                         ",".join(ops) or "-", count))
    for w in (8, 4, 2, 1):
        if w >= elem and flight[w] < 4:
            failures.append("%s: %d-byte packs (pointers that differ modulo 16) have %d loads in flight (want 4 or more)"
                            % (label, w, flight[w]))
    op = label.split("_")[0]
    if op in ("max", "min") and not any(o.startswith(op + ".") for o in ops):
        failures.append("%s: no %s.f16x2/bf16x2 instruction" % (label, op))

print()
print("%-22s %-28s %6s" % ("line-protocol element", "16-bit float instructions", "instrs"))
SCALAR = re.compile(r'\b((?:add|mul)\.rn|max|min)\.(f16x2|bf16x2|f16|bf16)\b')
for n in names:
    if not n.startswith("probe_element_"):
        continue
    body = bodies[n]
    ops = sorted(set("%s.%s" % m for m in SCALAR.findall(body)))
    print("%-22s %-28s %6d" % (n[len("probe_element_"):], ",".join(ops) or "- (software)", len(INSTRUCTION.findall(body))))
    if not ops:
        failures.append("%s: the element is computed without the hardware's 16-bit float instruction" % n)

for f in failures:
    print("FAIL: " + f)
sys.exit(1 if failures else 0)
PY
