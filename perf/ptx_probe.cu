// Kernels that each run exactly one of the GPU's Simple element loops (kernels/reduce_copy.h),
// so that perf/ptx_report.sh can read their PTX and ptxas's resource use loop by loop. Never
// launched: compiled by that script alone (nvcc -arch=sm_90 -ptx / -cubin -Xptxas -v).
//
// The loops are functions of their own (BRAID_OUTLINE), called with the step's flags as values:
// each probe calls one, as the collective kernels do.
#include "kernels/reduce_copy.h"

using namespace braid::kernels;

/// The reduce loop of T for Sum, with the flags as values (as the collective kernels call it).
#define BRAID_PROBE(T, name)                                                                                       \
  extern "C" __global__ void probe_reduce_##name(RedOpArgs args, uint32_t flags, const T* recv, const T* input, \
                                                 T* output, T* send, uint64_t n) {                               \
    reduceCopyStrided<T>(FuncSum<T>(args), flags, recv, input, output, send, n, threadIdx.x, blockDim.x);      \
  }

BRAID_PROBE(float, f32)
BRAID_PROBE(Half, f16)
BRAID_PROBE(BFloat16, bf16)
BRAID_PROBE(Fp8E4M3, f8e4m3)
BRAID_PROBE(Fp8E5M2, f8e5m2)

/// The copy loop (copyStrided), as the gather's receive-copy-send steps and sends use it.
extern "C" __global__ void probe_copy(const char* from, char* a, char* b, uint64_t bytes) {
  copyStrided(from, a, b, bytes, threadIdx.x, blockDim.x);
}
