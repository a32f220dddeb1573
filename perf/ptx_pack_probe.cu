// Kernels that each run one reduce loop of kernels/reduce_copy.h for a type and an op, or one
// element of the line protocols' arithmetic, so that perf/ptx_pack_report.sh can read in PTX
// how the loops load memory whose pointers differ modulo 16 and how 16-bit floats reduce.
// Never launched: compiled by that script alone (nvcc -arch=sm_90 -ptx).
#include "kernels/reduce_copy.h"

using namespace braid::kernels;

/// The Simple reduce loop of T for op Func, with the flags as values (as the collective
/// kernels call it).
#define BRAID_PACK_PROBE(T, Func, name)                                                                          \
  extern "C" __global__ void probe_loop_##name(RedOpArgs args, uint32_t flags, const T* recv, const T* input,  \
                                               T* output, T* send, uint64_t n) {                                 \
    reduceCopyStrided<T>(Func<T>(args), flags, recv, input, output, send, n, threadIdx.x, blockDim.x);         \
  }

/// One element of the line protocols (LL, LL128: primitives.h's combineRun calls combineValue
/// element by element).
#define BRAID_ELEMENT_PROBE(T, Func, name)                                                               \
  extern "C" __global__ void probe_element_##name(RedOpArgs args, uint32_t flags, const T* a, T* out) { \
    out[threadIdx.x] = combineValue<T>(Func<T>(args), flags, a[threadIdx.x], a[threadIdx.x + 32]);    \
  }

BRAID_PACK_PROBE(float, FuncSum, sum_f32)
BRAID_PACK_PROBE(double, FuncSum, sum_f64)
BRAID_PACK_PROBE(uint8_t, FuncSum, sum_u8)
BRAID_PACK_PROBE(Half, FuncSum, sum_f16)
BRAID_PACK_PROBE(Half, FuncMax, max_f16)
BRAID_PACK_PROBE(Half, FuncMin, min_f16)
BRAID_PACK_PROBE(BFloat16, FuncMax, max_bf16)
BRAID_PACK_PROBE(BFloat16, FuncMin, min_bf16)

BRAID_ELEMENT_PROBE(Half, FuncSum, sum_f16)
BRAID_ELEMENT_PROBE(Half, FuncProd, prod_f16)
BRAID_ELEMENT_PROBE(Half, FuncMax, max_f16)
BRAID_ELEMENT_PROBE(BFloat16, FuncSum, sum_bf16)
BRAID_ELEMENT_PROBE(BFloat16, FuncMin, min_bf16)
