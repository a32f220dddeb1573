// Kernels that each take one FIFO step of a protocol (kernels/primitives.h) as the
// collectives take it (receive, reduce with the input, send), and Direct AllReduce's one-shot
// exchange, so that perf/ptx_report.sh can count the system-scope releases, fences and stores
// each pays: those of a step's straight-line code once a step, those in its loops once a line
// (LL, LL128) or a spin. Never launched: compiled by that script alone (nvcc -arch=sm_90 -ptx).
// A unit of its own: called from here too, the element loops would get generic pointers, and
// perf/ptx_probe.cu reports them on global ones.
//
// The connections are copied with a GPU peer's transport (no step sizes: only a network proxy
// reads them) or a network's, so that the compiler drops the other's branches, as a reader of
// the report would.
#include "kernels/cuda_entry.cuh"

using namespace braid::kernels;

namespace {
__device__ ConnHandle probeConn(const ConnHandle* given, bool network) {
  ConnHandle c = *given;
  c.transport = network ? kFirstNetworkTransport : 1;  // (transport::Kind::kP2p)
  if (!network) c.sizes = nullptr;  // (as the connector hands a GPU peer's connection)
  return c;
}
__device__ void probeStep(Proto proto, bool network, const ConnHandle* send, const ConnHandle* recv,
                          const CollWork* work, const uint32_t* abortFlag, const float* in, float* out, uint64_t n) {
  BlockGroup g;
  const ConnHandle s = probeConn(send, network), r = probeConn(recv, network);
  Primitives<float, FuncSum<float>, BlockGroup> p(g, &s, &r, proto, FuncSum<float>(work->opArgs), abortFlag, work);
  p.step(kRecv | kInput | kSend, in, out, n);
  p.finish();
}
}  // namespace

#define BRAID_PROBE_STEP(name, proto, network)                                                                   \
  extern "C" __global__ void probe_step_##name(const ConnHandle* send, const ConnHandle* recv, const CollWork* work, \
                                               const uint32_t* abortFlag, const float* in, float* out, uint64_t n) { \
    probeStep(proto, network, send, recv, work, abortFlag, in, out, n);                                          \
  }
BRAID_PROBE_STEP(simple, Proto::kSimple, false)
BRAID_PROBE_STEP(simple_net, Proto::kSimple, true)
BRAID_PROBE_STEP(ll, Proto::kLL, false)
BRAID_PROBE_STEP(ll128, Proto::kLL128, false)

/// Direct AllReduce's one-shot form (kernels/algorithms/all_reduce_direct.h): a step to and
/// from every peer.
extern "C" __global__ void probe_direct(const CollWork* work, const RingHandle* ring, const uint32_t* abortFlag) {
  BlockGroup g;
  allReduceDirectOneShot<float, FuncSum<float>, BlockGroup>(g, *work, *ring, abortFlag);
}
