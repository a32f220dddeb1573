// Kernels that each take one FIFO step of a protocol (kernels/primitives.h) as the
// collectives take it (receive, reduce with the input, send), and Direct AllReduce's one-shot
// exchange, so that perf/ptx_report.sh can count the system-scope releases, fences and stores
// each pays: those of a step's straight-line code once a step, those in its loops once a line
// (LL, LL128) or a spin; and a block's marks at a launch's start and end (probe_marks). Never
// launched: compiled by that script alone (nvcc -arch=sm_90 -ptx).
// A unit of its own: called from here too, the element loops would get generic pointers, and
// perf/ptx_probe.cu reports them on global ones.
//
// The connections are a GPU peer's (transport kP2p); their addresses go to the out-of-line
// waits, so the compiler keeps the branches on their fields: the network's step-size store
// (recordStepSize) is counted though a GPU peer's connection skips it.
#include "kernels/cuda_entry.cuh"

using namespace braid::kernels;

namespace {
__device__ ConnHandle probeConn(const ConnHandle* given) {
  ConnHandle c = *given;
  c.transport = 1;  // (transport::Kind::kP2p)
  return c;
}
__device__ void probeStep(Proto proto, const ConnHandle* send, const ConnHandle* recv,
                          const CollWork* work, const uint32_t* abortFlag, const float* in, float* out, uint64_t n) {
  BlockGroup g;
  const ConnHandle s = probeConn(send), r = probeConn(recv);
  Primitives<float, FuncSum<float>, BlockGroup> p(g, &s, &r, proto, FuncSum<float>(work->opArgs), abortFlag, work);
  p.step(kRecv | kInput | kSend, in, out, n);
  p.finish();
}
}  // namespace

#define BRAID_PROBE_STEP(name, proto)                                                                   \
  extern "C" __global__ void probe_step_##name(const ConnHandle* send, const ConnHandle* recv, const CollWork* work, \
                                               const uint32_t* abortFlag, const float* in, float* out, uint64_t n) { \
    probeStep(proto, send, recv, work, abortFlag, in, out, n);                                          \
  }
BRAID_PROBE_STEP(simple, Proto::kSimple)
BRAID_PROBE_STEP(ll, Proto::kLL)
BRAID_PROBE_STEP(ll128, Proto::kLL128)

/// Direct AllReduce's one-shot form (kernels/algorithms/all_reduce_direct.h): a step to and
/// from every peer.
extern "C" __global__ void probe_direct(const CollWork* work, const RingHandle* ring, const uint32_t* abortFlag) {
  BlockGroup g;
  allReduceDirectOneShot<float, FuncSum<float>, BlockGroup>(g, *work, *ring, abortFlag);
}

/// A block's marks around a launch (kernels/cuda_entry.cuh): the host stores every operation
/// pays whatever it moves.
extern "C" __global__ void probe_marks(ChannelStatus* status, uint64_t seq) {
  markStarted(status, seq);
  markDone(status, seq);
}
