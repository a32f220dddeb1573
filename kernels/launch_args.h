// A CUDA launch's arguments in the kernel's parameters (NCCL passes its work the same way):
// where a launch's works, ring handles and peer connection handles fit kInlineArgBytes, the
// launcher packs them into an InlineArgs that travels by value with the launch, and the
// kernels read them from there (the GPU's parameter memory, no trip over the bus) instead of
// from host memory the GPU maps. Shared by the packer (host) and the kernels (device), so both
// agree on the layout:
//
//   collective: works[n], rings[nChannels], then for each work with peer connections its
//               peerSend[nRanks] and peerRecv[nRanks]; such a work's peerSend and peerRecv
//               hold the handles' byte offsets (never 0), which inlinePeers turns into
//               pointers on the device.
//   sends and receives: starts[nQueues + 1] (rounded up to 16 bytes), then the operations;
//               only launches without mapped receive buffers (PeerOp::mapped null).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/algorithms/send_recv.h"
#include "kernels/work.h"

// The parameter block's size, BRAID_KERNEL_PARAM_BYTES: meson.build's, in braid_config.h; a
// compile without the build folder (perf/ptx_report.sh's) takes it from the CUDA version alone.
#if __has_include("braid_config.h")
#include "braid_config.h"
#endif
#ifndef BRAID_KERNEL_PARAM_BYTES
#if defined(CUDART_VERSION) && CUDART_VERSION < 12010
#define BRAID_KERNEL_PARAM_BYTES 4096
#else
#define BRAID_KERNEL_PARAM_BYTES 32764
#endif
#endif

namespace braid::kernels {

/// The kernels' six parameters before the arguments, each in an 8-byte slot (pointers, the
/// launch's 64-bit number; an int in the low half of its slot), as the CUDA ABI lays them out.
constexpr size_t kParamPrefixBytes = 48;
/// Bytes of arguments any launch may carry: with the other parameters within the 4 KiB every
/// CUDA device and driver accepts.
constexpr size_t kSmallInlineArgBytes = 3584;
/// The kernels' argument block: up to BRAID_KERNEL_PARAM_BYTES of parameters in all (32,764
/// where the build's CUDA is 12.1 or later and every -Dcuda-arch is sm_70 or newer, which a
/// 12.1 driver then launches; 4,096 otherwise: meson.build). A launch passes only the bytes it
/// uses (launchBytes), and only up to kSmallInlineArgBytes where the driver is older.
constexpr size_t kInlineArgBytes =
    BRAID_KERNEL_PARAM_BYTES > 4096 ? (BRAID_KERNEL_PARAM_BYTES - kParamPrefixBytes) / 16 * 16 : kSmallInlineArgBytes;

struct alignas(16) InlineArgs {
  unsigned char bytes[kInlineArgBytes];
};

/// A launch's whole parameter block, as the kernels declare it (cuda_entry.cuh): the six first
/// parameters, then the arguments.
struct alignas(16) KernelParams {
  uint64_t slot[kParamPrefixBytes / 8];
  InlineArgs args;
};
static_assert(offsetof(KernelParams, args) == kParamPrefixBytes && sizeof(KernelParams) <= BRAID_KERNEL_PARAM_BYTES + 16);

/// The most bytes of arguments a launch carries in its parameters: none where disabled
/// (BRAID_INLINE_LAUNCH_ARGS=0), the whole block where the driver (cudaDriverGetVersion) is
/// 12.1 or later and the GPU sm_70 or newer, else what fits 4 KiB.
constexpr size_t inlineArgLimit(bool enabled, int driverVersion, int computeMajor) {
  if (!enabled) return 0;
  return driverVersion >= 12010 && computeMajor >= 7 ? kInlineArgBytes : kSmallInlineArgBytes;
}

BRAID_HOST_DEVICE constexpr size_t roundUp16(size_t n) { return (n + 15) / 16 * 16; }

/// The bytes a collective launch's arguments take inline.
BRAID_HOST_DEVICE inline size_t inlineCollectiveBytes(int n, int nChannels, int withPeers, int nRanks) {
  return static_cast<size_t>(n) * sizeof(CollWork) + static_cast<size_t>(nChannels) * sizeof(RingHandle) +
         static_cast<size_t>(withPeers) * 2 * static_cast<size_t>(nRanks) * sizeof(ConnHandle);
}

/// Host: packs n = nWorks x nChannels works (those with peerSend carry nRanks handles each
/// way) and nChannels rings into `out`; false, nothing written, when they do not fit `limit`
/// bytes (at most kInlineArgBytes: what this launch's driver accepts).
inline bool packCollective(const CollWork* works, int n, const RingHandle* rings, int nChannels, int nRanks,
                           InlineArgs* out, size_t limit = kInlineArgBytes) {
  int withPeers = 0;
  for (int i = 0; i < n; ++i) withPeers += works[i].peerSend != nullptr;
  if (inlineCollectiveBytes(n, nChannels, withPeers, nRanks) > std::min(limit, kInlineArgBytes)) return false;
  auto* w = reinterpret_cast<CollWork*>(out->bytes);
  std::memcpy(w, works, static_cast<size_t>(n) * sizeof(CollWork));
  size_t at = static_cast<size_t>(n) * sizeof(CollWork);
  std::memcpy(out->bytes + at, rings, static_cast<size_t>(nChannels) * sizeof(RingHandle));
  at += static_cast<size_t>(nChannels) * sizeof(RingHandle);
  const size_t each = static_cast<size_t>(nRanks) * sizeof(ConnHandle);
  for (int i = 0; i < n; ++i) {
    if (works[i].peerSend == nullptr) continue;
    std::memcpy(out->bytes + at, works[i].peerSend, each);
    std::memcpy(out->bytes + at + each, works[i].peerRecv, each);
    w[i].peerSend = reinterpret_cast<const ConnHandle*>(static_cast<uintptr_t>(at));
    w[i].peerRecv = reinterpret_cast<const ConnHandle*>(static_cast<uintptr_t>(at + each));
    at += 2 * each;
  }
  return true;
}

/// The packed works and rings of a collective launch of n works.
BRAID_HOST_DEVICE inline const CollWork* inlineWorks(const unsigned char* bytes) {
  return reinterpret_cast<const CollWork*>(bytes);
}
BRAID_HOST_DEVICE inline const RingHandle* inlineRings(const unsigned char* bytes, int n) {
  return reinterpret_cast<const RingHandle*>(bytes + static_cast<size_t>(n) * sizeof(CollWork));
}
/// A packed work's peerSend or peerRecv (an offset) as a pointer into `bytes`.
BRAID_HOST_DEVICE inline const ConnHandle* inlinePeers(const unsigned char* bytes, const ConnHandle* packed) {
  return packed == nullptr ? nullptr : reinterpret_cast<const ConnHandle*>(bytes + reinterpret_cast<uintptr_t>(packed));
}

/// The bytes a launch of nQueues queues and nOps sends and receives takes inline.
BRAID_HOST_DEVICE inline size_t inlinePeerBytes(int nQueues, int nOps) {
  return roundUp16((static_cast<size_t>(nQueues) + 1) * sizeof(int)) + static_cast<size_t>(nOps) * sizeof(PeerOp);
}

/// Host: packs a group's sends and receives (queue q: ops[starts[q], starts[q + 1])) into
/// `out`; false, nothing written, when they do not fit `limit` bytes or one maps a receiver's
/// buffer.
inline bool packPeers(const PeerOp* ops, const int* starts, int nQueues, InlineArgs* out, size_t limit = kInlineArgBytes) {
  const int nOps = starts[nQueues];
  const size_t startBytes = roundUp16((static_cast<size_t>(nQueues) + 1) * sizeof(int));
  if (inlinePeerBytes(nQueues, nOps) > std::min(limit, kInlineArgBytes)) return false;
  for (int i = 0; i < nOps; ++i)
    if (ops[i].mapped != nullptr) return false;
  std::memcpy(out->bytes, starts, (static_cast<size_t>(nQueues) + 1) * sizeof(int));
  std::memcpy(out->bytes + startBytes, ops, static_cast<size_t>(nOps) * sizeof(PeerOp));
  return true;
}

/// The packed starts and operations of a launch of nQueues queues.
BRAID_HOST_DEVICE inline const int* inlineStarts(const unsigned char* bytes) { return reinterpret_cast<const int*>(bytes); }
BRAID_HOST_DEVICE inline const PeerOp* inlineOps(const unsigned char* bytes, int nQueues) {
  return reinterpret_cast<const PeerOp*>(bytes + roundUp16((static_cast<size_t>(nQueues) + 1) * sizeof(int)));
}

}  // namespace braid::kernels
