#!/bin/bash
# The PTX report: compiles the GPU's Simple element loops (perf/ptx_probe.cu, one kernel per
# loop over kernels/reduce_copy.h) for sm_90 and reports, for the reduce loops of f32, f16 and
# bf16 and for the copy loop, the width of their global loads and stores, the 16-byte loads a
# thread issues before its first store (the loads in flight per pass), the paired 16-bit
# arithmetic, and ptxas's registers, stack and spills per thread. With a build folder it also
# reports ptxas's figures for the real collective kernels of that build (its generated
# cuda_f32.cu and cuda_copy.cu units), and checks that the copying collectives' LL and LL128
# steps keep no byte loop (primitives.h, loadRun/storeRun: 8-byte words, bytes unrolled).
# Always, the figures of the one-sided kernels (kernels/cuda_one_sided.cu): any stack or spill
# there fails the report.
# Then, per step function (Simple, LL, LL128, Direct's one-shot exchange:
# perf/ptx_probe_steps.cu), the system-scope releases, fences, relaxed system-scope stores (the
# words a host or a peer reads), acquire loads, block barriers and loads of the abort word
# (direct, or behind the block's abort watch), in the step's straight-line code (once a step),
# in its loops (once a line or a spin) and in what it calls (a wait's slow half, the signature
# once an operation); and a block's host stores, releases and fences around each launch (its
# marks).
#
# Fails (exit 1) when a loop lost its 16-byte accesses, issues fewer than 4 loads per pass,
# a 16-bit reduce lost its paired instructions, anything spills, (with a build folder) a line
# protocol's copy loops over single bytes, or a Simple, LL or LL128 step holds more than one
# system-scope release or fence in its straight-line code (Direct's one-shot: two) or any in
# its loops, a Simple, LL or LL128 step holds more than two block barriers (one after the waits,
# one before publishing), a wait reads the abort word other than behind the block's watch, or a
# block's marks take more than two host stores or any release or fence. Skips (exit 77, with the
# reason) where nvcc is absent. Needs nothing but nvcc and python3; writes only to a temporary
# folder. CI runs it where nvcc is present (test/run_all.sh).
#
#   perf/ptx_report.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/cuda/bin:$PATH"
if ! command -v nvcc > /dev/null; then
  echo "ptx_report: skipped: nvcc is not installed (on PATH or at /usr/local/cuda/bin)"
  exit 77
fi
build=${1:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
flags=(-std=c++20 --expt-relaxed-constexpr -arch=sm_90 -I. -Isrc)
nvcc "${flags[@]}" -ptx perf/ptx_probe.cu -o "$tmp/probe.ptx"
nvcc "${flags[@]}" -cubin -Xptxas -v perf/ptx_probe.cu -o "$tmp/probe.cubin" 2> "$tmp/probe.ptxas"
nvcc "${flags[@]}" -ptx perf/ptx_probe_steps.cu -o "$tmp/steps.ptx"
kernel_logs=()
if [ -n "$build" ]; then
  for unit in cuda_f32.cu cuda_copy.cu; do
    src=$(find "$build/kernels" -maxdepth 1 -name "$unit" | head -1)
    if [ -z "$src" ]; then
      echo "ptx_report: $build has no generated $unit (a CUDA build of Braid?): its kernels are not reported"
      continue
    fi
    nvcc "${flags[@]}" -ptx "$src" -o "$tmp/$unit.ptx"
    ptxas -arch=sm_90 -v "$tmp/$unit.ptx" -o "$tmp/$unit.cubin" 2> "$tmp/$unit.ptxas"
    kernel_logs+=("$tmp/$unit.ptxas")
  done
fi

# The one-sided operations' kernels (a source unit, in every CUDA build): one thread each, they
# may keep no stack (the wait's descriptors are read where the launch's parameters lie).
nvcc "${flags[@]}" -ptx kernels/cuda_one_sided.cu -o "$tmp/one_sided.ptx"
ptxas -arch=sm_90 -v "$tmp/one_sided.ptx" -o "$tmp/one_sided.cubin" 2> "$tmp/cuda_one_sided.cu.ptxas"
kernel_logs+=("$tmp/cuda_one_sided.cu.ptxas")

python3 - "$tmp/probe.ptx" "$tmp/probe.ptxas" "$tmp/steps.ptx" "${kernel_logs[@]}" <<'PY'
import re, subprocess, sys

probe_log = open(sys.argv[2]).read()
kernel_logs = sys.argv[4:]

def function_bodies(ptx):
    """Function bodies by name (.entry kernels and .func functions with a body)."""
    found = {}
    for m in re.finditer(r'^(?:\.visible |\.weak )?\.(?:entry|func)\s+(?:\([^)]*\)\s*)?(\w+)\(.*?^\{(.*?)^\}', ptx, re.S | re.M):
        found[m.group(1)] = m.group(2)
    return found

bodies = function_bodies(open(sys.argv[1]).read())
step_bodies = function_bodies(open(sys.argv[3]).read())

WIDE_LOAD = re.compile(r'^\s*ld\.global(?:\.[a-z]+)*\.(?:v2\.(?:u64|b64|s64|f64)|v4\.(?:u32|b32|s32|f32))\s', re.M)
WIDE_STORE = re.compile(r'^\s*st\.global(?:\.[a-z]+)*\.(?:v2\.(?:u64|b64|s64|f64)|v4\.(?:u32|b32|s32|f32))\s', re.M)
ANY_STORE = re.compile(r'^\s*st\.global', re.M)
ACCESS = re.compile(r'^\s*(ld|st)\.global(\S*)', re.M)

def loads_before_store(body):
    """The longest run of 16-byte loads with no global store between them: the loads a thread
    has in flight in the unrolled pass."""
    best = run = 0
    for kind, suffix in ACCESS.findall(body):
        if kind == 'st':
            run = 0
        elif WIDE_LOAD.match('ld.global' + suffix + ' '):
            run += 1
            best = max(best, run)
    return best

def resources(log):
    """ptxas -v's figures by function: {name: [registers or None, stack bytes, spill bytes]}.
    Registers are given for entry functions (a called function's count is in its caller's)."""
    found, entry, current = {}, None, None
    for line in log.splitlines():
        m = re.search(r"Compiling entry function '(\w+)'", line)
        if m:
            entry = m.group(1)
            found.setdefault(entry, [None, 0, 0])
        m = re.search(r"Function properties for (\w+)", line)
        if m:
            current = m.group(1)
            found.setdefault(current, [None, 0, 0])
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and current:
            found[current][1] = int(m.group(1))
            found[current][2] = int(m.group(2)) + int(m.group(3))
        m = re.search(r"Used (\d+) registers", line)
        if m and entry:
            found[entry][0] = int(m.group(1))
    return found

def plainName(pretty):
    """A demangled name without namespaces, template arguments, parameters or return type."""
    text, depth, out = pretty.replace("braid::kernels::", "").split("(")[0], 0, []
    for ch in text:
        depth += ch == "<"
        if depth == 0:
            out.append(ch)
        depth -= ch == ">"
    return "".join(out).split()[-1] if "".join(out).split() else pretty

def demangle(names):
    try:
        return subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout.split("\n")
    except OSError:
        return list(names)

failures = []
probe_figures = resources(probe_log)
print("%-26s %8s %8s %10s %8s %6s %6s %7s" % ("loop", "16B ld", "16B st", "ld/pass", "paired", "regs", "stack", "spills"))
# The loops are functions of their own (BRAID_OUTLINE): reduceCopyStrided<T, FuncSum<T>> for
# each type, and copyStrided.
TYPES = {"f32": "float", "f16": "Half", "bf16": "BFloat16", "f8e4m3": "Fp8E4M3", "f8e5m2": "Fp8E5M2"}
mangled = sorted(bodies)
pretty = dict(zip(mangled, demangle(mangled)))
rows = []
for kind, cname in TYPES.items():
    want = "reduceCopyStrided<%s, braid::kernels::FuncSum<%s" % (cname if kind == "f32" else "braid::kernels::" + cname,
                                                                cname if kind == "f32" else "braid::kernels::" + cname)
    match = next((n for n in mangled if pretty[n].startswith("void braid::kernels::" + want)), None)
    if match is None:
        failures.append("the reduce loop of %s (reduceCopyStrided) is missing from the probe's PTX" % kind)
    else:
        rows.append((match, kind))
copy_name = next((n for n in mangled if plainName(pretty[n]) == "copyStrided"), None)
if copy_name is None:
    failures.append("the copy loop (copyStrided) is missing from the probe's PTX")
else:
    rows.append((copy_name, "copy"))
for name, kind in rows:
    body = bodies.get(name)
    if body is None:
        failures.append("%s: not in the PTX" % name)
        continue
    wide_ld, wide_st = len(WIDE_LOAD.findall(body)), len(WIDE_STORE.findall(body))
    in_flight = loads_before_store(body)
    paired = len(re.findall(r'\b(?:add|mul)\.rn\.(?:f16x2|bf16x2)\b', body))
    if kind.startswith("f8"):  # fp8 adds in pairs of halves, converted in hardware both ways
        converts = len(re.findall(r'\bcvt\.rn\.satfinite\.e[45]m[23]x2\.f16x2\b', body))
        paired = paired if converts else 0
    regs, stack, spills = probe_figures.get(name, [None, 0, 0])
    # (a called function's registers are counted in its probe kernel's)
    regs = probe_figures.get("probe_copy" if kind == "copy" else "probe_reduce_" + kind, [None])[0]
    label = "copyStrided" if kind == "copy" else "reduceCopyStrided " + kind
    print("%-26s %8d %8d %10d %8s %6s %6d %7d" % (label, wide_ld, wide_st, in_flight,
                                                  paired if kind not in ("f32", "copy") else "-",
                                                  regs if regs is not None else "?", stack, spills))
    if wide_ld == 0 or wide_st == 0:
        failures.append("%s: no 16-byte global loads or stores" % label)
    if in_flight < 4:
        failures.append("%s: only %d 16-byte loads issued before a store (want 4 or more)" % (label, in_flight))
    if kind not in ("f32", "copy") and paired == 0:
        failures.append("%s: no paired 16-bit arithmetic (add.rn.f16x2 / bf16x2, fp8 through halves)" % label)
    if spills:
        failures.append("%s: %d bytes of spills" % (label, spills))

# The real kernels: ptxas's figures per function, grouped by name across the units' types and
# ops (the largest of each). Spills in the loops that move the data fail the report; spills
# in the algorithms' control code (once a step, not once a pack) are only reported.
HOT = ("reduceCopyStrided", "copyStrided", "stepLL")
if kernel_logs:
    print()
    print("%-26s %6s %6s %7s   %s" % ("kernel function", "regs", "stack", "spills", "units"))
for log_path in kernel_logs:
    unit = log_path.rsplit("/", 1)[-1].replace(".ptxas", "")
    figures = resources(open(log_path).read())
    names = sorted(figures)
    plain = demangle(names)
    groups = {}
    for name, pretty in zip(names, plain):
        short = plainName(pretty)
        g = groups.setdefault(short, [None, 0, 0])
        regs, stack, spills = figures[name]
        if regs is not None:
            g[0] = max(g[0] or 0, regs)
        g[1], g[2] = max(g[1], stack), max(g[2], spills)
    for short, (regs, stack, spills) in sorted(groups.items()):
        print("%-26s %6s %6d %7d   %s" % (short[:26], regs if regs is not None else "-", stack, spills, unit))
        hot = short.split("::")[-1] in HOT
        if spills and hot:
            failures.append("%s (%s): %d bytes of spills in a data loop" % (short, unit, spills))
        if unit == "cuda_one_sided.cu" and (stack or spills):
            failures.append("%s (%s): %d bytes of stack, %d of spills" % (short, unit, stack, spills))

# The copying collectives' line protocols (the copy unit's Primitives<unsigned char> stepLL and
# stepLL128) copy the user's bytes in 8-byte words where the buffer is aligned, and byte by
# byte, unrolled in registers, where it is not (primitives.h, loadRun/storeRun): neither may
# keep a byte loop, i.e. an innermost loop that stores single bytes and touches no FIFO word
# (the FIFO's accesses are volatile, relaxed, acquire or release; the line loop has them).
# A memcpy of a run-time size, as these steps had, compiles to exactly such a loop.
PLAIN_WORD_STORE = re.compile(r'^\s*st(?:\.global)?\.(?:u64|b64|v2\.u32|v2\.b32)\s', re.M)  # (8 bytes at once)
BYTE_STORE = re.compile(r'^\s*st(?:\.global)?\.(?:u8|b8)\s')
FIFO_ACCESS = re.compile(r'^\s*(?:ld|st)\.(?:volatile|acquire|release|relaxed)\.')

def byte_loops(body):
    """Innermost loops (a label and a later branch back to it, holding no other such pair)
    that store single bytes and access no FIFO word."""
    lines = body.split("\n")
    labels = {}
    for i, line in enumerate(lines):
        m = re.match(r'^\s*(\$\w+):', line)
        if m:
            labels[m.group(1)] = i
    loops = []
    for i, line in enumerate(lines):
        m = re.search(r'\bbra(?:\.uni)?\s+(\$\w+);', line)
        if m and m.group(1) in labels and labels[m.group(1)] < i:
            loops.append((labels[m.group(1)], i))
    inner = [l for l in loops if not any(o != l and l[0] <= o[0] and o[1] <= l[1] for o in loops)]
    return sum(1 for a, b in inner
               if any(BYTE_STORE.match(x) for x in lines[a:b + 1]) and not any(FIFO_ACCESS.match(x) for x in lines[a:b + 1]))

for log_path in kernel_logs:
    if not log_path.endswith("cuda_copy.cu.ptxas"):
        continue
    unit_ptx = open(log_path.replace(".ptxas", ".ptx")).read()
    unit_bodies = function_bodies(unit_ptx)
    print()
    print("%-26s %9s %10s" % ("copy unit line step", "8B st", "byte loops"))
    for step in ("stepLL", "stepLL128"):
        # (mangled: Primitives<unsigned char, ...>::stepLL(...): "_ZN5braid7kernels10PrimitivesIh...E6stepLLE";
        # the waits' lambdas inside it have names of their own)
        names = [n for n in unit_bodies
                 if n.startswith("_ZN5braid7kernels10PrimitivesIh") and ("%d%sE" % (len(step), step)) in n]
        if not names:
            failures.append("cuda_copy.cu: no Primitives<unsigned char>::%s in its PTX" % step)
            continue
        for name in names:
            words, loops = len(PLAIN_WORD_STORE.findall(unit_bodies[name])), byte_loops(unit_bodies[name])
            print("%-26s %9d %10d" % (step, words, loops))
            if loops:
                failures.append("cuda_copy.cu %s: %d loop(s) copying the user's data byte by byte" % (step, loops))

# The steps' bookkeeping (perf/ptx_probe.cu's probe_step_* and probe_direct): per step
# function, the system-scope releases (st/red/atom .release or .acq_rel .sys), fences
# (fence.*.sys, membar.sys), acquire loads (ld.acquire.sys) and relaxed system-scope stores
# (the words a host or a peer reads: head, tail, step sizes, the channel's status; the data
# slots take plain or volatile stores). A release costs the GPU a system fence, which waits for
# the thread's earlier stores to drain, over PCIe where they went to host memory. Counted
# statically: the step's straight-line code runs once a step, its loops once a line or pack
# (and its waits once a spin), its callees when called (the slow half of a wait, the
# signature once an operation). And the block barriers (bar.sync, bar.red: __syncthreads and
# __syncthreads_or) a step stops the whole block at: two, one once the waits are over (thread 0
# waits for the received step, thread 32 for credits, at once) and one before thread 0
# publishes head and tail. Fails when a step's straight-line code holds more than one release
# or fence, or its loops any (LL, LL128: none a line), or a step more than two barriers.
def callees(body):
    return re.findall(r'\bcall(?:\.uni)?\s*(?:\([^)]*\)\s*,)?\s*(\w+)\s*,', body, re.S)

def loop_lines(body):
    """The body's lines, and the indices of those inside a loop: in a basic block that lies on
    a cycle of the control flow (a strongly connected set of blocks, or a block branching to
    itself). Block order says nothing: the compiler lays cold code out after a function's end."""
    lines = body.split("\n")
    starts, labels = [0], {}
    for i, line in enumerate(lines):
        m = re.match(r'^\s*(\$\w+):', line)
        if m:
            labels[m.group(1)] = i
            starts.append(i)
        elif re.match(r'^\s*(?:@!?%\w+\s+)?(?:bra|ret|exit)\b', line):
            starts.append(i + 1)
    starts = sorted(set(x for x in starts if x < len(lines)))
    spans = [(a, (starts[k + 1] if k + 1 < len(starts) else len(lines))) for k, a in enumerate(starts)]
    block_at = {a: k for k, (a, _) in enumerate(spans)}
    succ = []
    for k, (a, b) in enumerate(spans):
        out, falls = [], True
        for line in lines[a:b]:
            m = re.match(r'^\s*(@!?%\w+\s+)?(bra(?:\.uni)?|ret|exit)\b\s*(\$\w+)?', line)
            if m:
                if m.group(3) in labels:
                    out.append(block_at[labels[m.group(3)]])
                falls = m.group(1) is not None
        if falls and k + 1 < len(spans):
            out.append(k + 1)
        succ.append(out)
    # Tarjan's strongly connected components, iteratively.
    index, low, on, stack, looped, counter = {}, {}, set(), [], set(), [0]
    for root in range(len(spans)):
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = counter[0]
                counter[0] += 1
                stack.append(v)
                on.add(v)
            if i < len(succ[v]):
                work.append((v, i + 1))
                w = succ[v][i]
                if w not in index:
                    work.append((w, 0))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1 or v in succ[v]:
                    looped.update(comp)
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
    inside = set()
    for k in looped:
        inside.update(range(*spans[k]))
    return lines, inside

# The abort word (host memory on a GPU): a waiting thread's 4-byte relaxed system-scope (or
# volatile) load; the FIFO's flags are 8 or 16 bytes, head and tail 8. "Watched" when the
# block's abort watch guards it (platform.h, pollAbortWatch: the load follows its block-scope
# compare-and-swap, which one thread of the block wins a period), "direct" otherwise (every
# waiting thread reads host memory at every poll).
ABORT_LOAD = re.compile(r'^\s*ld\.(?:relaxed\.sys|volatile)(?:\.global)?\.(?:b32|u32)\s')

def abort_loads(lines, among=None):
    """[direct, watched] loads of the abort word among lines (indices in `among`, or all)."""
    c = [0, 0]
    for i, line in enumerate(lines):
        if (among is None or i in among) and ABORT_LOAD.match(line):
            c[1 if any("atom.cas" in x and ".cta" in x for x in lines[max(0, i - 12):i]) else 0] += 1
    return c

def sync_counts(lines):
    """[releases, fences, relaxed system stores, acquire loads, block barriers] among these PTX
    lines (a barrier: bar.sync, barrier.sync, bar.red and the like: __syncthreads and
    __syncthreads_or; a warp's bar.warp.sync is none)."""
    c = [0, 0, 0, 0, 0]
    for line in lines:
        op = line.strip().split(" ")[0].split("\t")[0]
        sys_scope = ".sys" in op
        if re.match(r'(?:st|red|atom)\.', op) and sys_scope:
            c[0 if (".release" in op or ".acq_rel" in op) else 2] += 1
        elif (op.startswith("fence.") and sys_scope) or op == "membar.sys":
            c[1] += 1
        elif op.startswith("ld.") and ".acquire" in op and sys_scope:
            c[3] += 1
        elif re.match(r'(?:bar|barrier)\.(?:sync|red|arrive)\b', op) or op in ("bar", "barrier"):
            c[4] += 1
    return c

def step_function(probe):
    """The probe's step code: the kernel itself (Simple: inline), else the out-of-line step."""
    wanted = {"probe_step_ll": "6stepLLE", "probe_step_ll128": "9stepLL128E", "probe_direct": "22allReduceDirectOneShot"}
    if probe not in wanted:
        return probe
    return next((n for n in callees(step_bodies.get(probe, "")) if wanted[probe] in n), None)

# (the most releases and fences a step's straight-line code may hold: one a posted step; Direct's
# one-shot posts two, its sends to every peer and the frees of their slots, each with one fence
# in every thread that serves a peer, together)
STEPS = [("Simple", "probe_step_simple", 1), ("LL", "probe_step_ll", 1), ("LL128", "probe_step_ll128", 1), ("Direct one-shot", "probe_direct", 2)]
print()
print("%-16s %-34s %7s %6s %7s %7s %5s %7s %7s" % ("step", "where (counted statically)", "rel.sys", "fence", "st.sys", "ld.acq",
                                                    "bar", "abort", "watched"))
for label, probe, limited in STEPS:
    name = step_function(probe)
    if probe not in step_bodies or name is None or name not in step_bodies:
        failures.append("%s: no %s in the probe's PTX" % (label, probe))
        continue
    lines, inside = loop_lines(step_bodies[name])
    straight = sync_counts([l for i, l in enumerate(lines) if i not in inside])
    looped = sync_counts([l for i, l in enumerate(lines) if i in inside])
    looped_abort = abort_loads(lines, inside)
    print("%-16s %-34s %7d %6d %7d %7d %5d" % (label, "per step (straight-line code)", *straight))
    print("%-16s %-34s %7d %6d %7d %7d %5d %7d %7d" % ("", "in its loops (per line, per spin)", *looped, *looped_abort))
    direct_abort = looped_abort[0]
    seen, todo, called = set(), [c for c in callees(step_bodies[name]) if c != name], {}
    while todo:
        callee = todo.pop(0)
        if callee in seen or callee not in step_bodies:
            continue
        seen.add(callee)
        todo += callees(step_bodies[callee])
        short = plainName(demangle([callee])[0])
        if short in ("reduceCopyStrided", "copyStrided"):
            continue  # (the element loops: no synchronisation, reported above)
        counts = sync_counts(step_bodies[callee].split("\n")) + abort_loads(step_bodies[callee].split("\n"))
        called[short] = [max(a, b) for a, b in zip(called.get(short, counts), counts)]
    for short, counts in called.items():  # (a wait's instantiations by what they wait for: the most of any)
        print("%-16s %-34s %7d %6d %7d %7d %5d %7d %7d" % ("", "  calls " + short[:27], *counts))
        direct_abort += counts[5]
    if direct_abort:
        failures.append("%s: %d load(s) of the abort word in a wait not behind the block's abort watch"
                        " (every waiting thread would read host memory)" % (label, direct_abort))
    if straight[0] + straight[1] > limited:
        failures.append("%s: %d system-scope releases and fences a step (at most %d)" % (label, straight[0] + straight[1], limited))
    if limited == 1 and straight[4] + looped[4] > 2:  # (the protocols' steps; Direct's one-shot has its own shape)
        failures.append("%s: %d block barriers a step (at most 2: after the waits, before publishing)"
                        % (label, straight[4] + looped[4]))
    if looped[0] + looped[1] > 0:
        failures.append("%s: %d system-scope releases or fences in its loops (a line's or a spin's: want none)"
                        % (label, looped[0] + looped[1]))

# A kernel's fixed cost per operation (perf/ptx_probe_steps.cu's probe_marks: cuda_entry.cuh's
# markStarted and markDone, which every block runs once a launch): its stores to the channel's
# status (host memory: global stores of any kind, a 16-byte one counting once) and the
# system-scope releases and fences among them. Fails beyond one store each and any release or
# fence (the host reads the marks for the watchdog and the profiler, neither needing their order).
marks = step_bodies.get("probe_marks")
if marks is None:
    failures.append("no probe_marks in the probe's PTX")
else:
    mark_lines = marks.split("\n")
    stores = sum(1 for l in mark_lines if re.match(r'^\s*st\.(?:global\.|volatile\.|relaxed\.|release\.|weak\.)?', l.strip())
                 and not l.strip().startswith("st.param") and not l.strip().startswith("st.shared"))
    c = sync_counts(mark_lines)
    print()
    print("%-34s %7s %7s %6s" % ("per operation (a block's marks)", "stores", "rel.sys", "fence"))
    print("%-34s %7d %7d %6d" % ("markStarted + markDone", stores, c[0], c[1]))
    if stores > 2 or c[0] + c[1] > 0:
        failures.append("markStarted + markDone: %d stores to host memory, %d releases or fences (at most 2 and 0)"
                        % (stores, c[0] + c[1]))

if failures:
    print("ptx_report: FAIL")
    for f in failures:
        print("  " + f)
    sys.exit(1)
print("ptx_report: OK (16-byte loads and stores in every loop, 4+ loads in flight, paired 16-bit arithmetic, no spills;"
      " at most one system-scope release or fence and two barriers a step, and none a line; the abort word read"
      " behind the block's watch only; two fence-free host stores an operation; no byte loops in the line protocols'"
      " copies where a build was given)")
PY
