// What the tests on the emulated device share (emulated_device_test.cc, emulated_rma_test.cc):
// the device installed for the communicators a test makes, the ranks' streams, and a rank's
// stream synchronisation.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/init.h"
#include "datapath/data_path.h"
#include "harness/ranks.h"
#include "integration/emulated_device.h"

namespace braid::test {

/// The emulated device for every communicator created while it lives.
using Emulated = EmulatedDeviceScope;

/// A stream of the rank's own (the emulated device orders launches itself; the pointer only
/// has to differ between ranks of one process, as real streams would).
inline cudaStream_t streamOf(int rank) {
  return reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(0x1000 + 16 * rank));
}

/// Waits for what the rank has enqueued (what cudaStreamSynchronize would do).
inline void sync(ncclComm_t comm) { comm->dataPath().synchronize(); }

/// The byte rank `from`'s put writes at position i of its part of a window.
inline unsigned char putPattern(int from, size_t i) { return static_cast<unsigned char>(from * 37 + i * 7 + 1); }

/// One rank's part of the one-sided exactness check (emulated_rma_test.cc, and across hosts
/// emulated_rma_net_test.cc), on windows of `slot` bytes per rank: every rank puts each of
/// `sizes` (cycling through `contexts`) to every other rank's part of its window, waits for them
/// on the stream, and finds exactly the peers' bytes there, nothing past them; then two
/// ncclSignals satisfy one wait of 2. `overNetwork`: the puts' bytes must have reached the
/// device window through the host copier (EmulatedDevice::hostCopies).
inline void expectPutsLandExactly(int rank, int n, ncclComm_t comm, ncclWindow_t win, char* window, size_t slot,
                                  const std::vector<size_t>& sizes, int contexts, bool overNetwork) {
  const cudaStream_t stream = streamOf(rank);
  std::vector<unsigned char> source(slot);
  for (size_t i = 0; i < slot; ++i) source[i] = putPattern(rank, i);
  const int copiesBefore = EmulatedDevice::hostCopies.load();
  int ctx = 0;
  for (size_t bytes : sizes) {
    const std::string at = " (" + std::to_string(bytes) + " bytes)";
    std::memset(window, 0, slot * n);
    float token = 1, tokens = 0;  // (an all-reduce as a barrier: every window cleared before any put)
    EXPECT_OK(ncclAllReduce(&token, &tokens, 1, ncclFloat, ncclSum, comm, stream));
    sync(comm);
    ctx = (ctx + 1) % contexts;
    for (int peer = 0; peer < n; ++peer) {
      if (peer != rank) EXPECT_OK(ncclPutSignal(source.data(), bytes, ncclUint8, peer, win, rank * slot, 0, ctx, 0, comm, stream));
    }
    std::vector<ncclWaitSignalDesc_t> descs;
    for (int peer = 0; peer < n; ++peer)
      if (peer != rank) descs.push_back({1, peer, 0, ctx});
    EXPECT_OK(ncclWaitSignal(static_cast<int>(descs.size()), descs.data(), comm, stream));
    sync(comm);
    for (int from = 0; from < n; ++from) {
      const char* part = window + from * slot;
      size_t wrong = 0;
      for (size_t i = 0; i < slot; ++i) {
        const unsigned char want = from != rank && i < bytes ? putPattern(from, i) : 0;
        wrong += static_cast<unsigned char>(part[i]) != want;
      }
      expect(wrong == 0, std::to_string(wrong) + " bytes from rank " + std::to_string(from) + " wrong" + at);
    }
  }
  const int landed = EmulatedDevice::hostCopies.load() - copiesBefore;
  const int nonEmpty = static_cast<int>(std::count_if(sizes.begin(), sizes.end(), [](size_t s) { return s > 0; }));
  expect(!overNetwork || landed >= (n - 1) * nonEmpty,
         "only " + std::to_string(landed) + " puts were copied into the device window");
  const int peer = (rank + 1) % n, from = (rank + n - 1) % n;
  EXPECT_OK(ncclSignal(peer, 0, 0, 0, comm, stream));
  EXPECT_OK(ncclSignal(peer, 0, 0, 0, comm, stream));
  ncclWaitSignalDesc_t both = {2, from, 0, 0};
  EXPECT_OK(ncclWaitSignal(1, &both, comm, stream));
  sync(comm);
  const uint64_t got = comm->signalsIfMade()->arrivedCount(from, 0);
  expect(got == comm->signalsIfMade()->consumed(from, 0),
         "signals of rank " + std::to_string(from) + " on ctx 0: " + std::to_string(got) + " arrived, " +
             std::to_string(comm->signalsIfMade()->consumed(from, 0)) + " waited for");
  // (all ranks end together: none destroys its communicator while a peer still puts to it)
  float token = 1, tokens = 0;
  EXPECT_OK(ncclAllReduce(&token, &tokens, 1, ncclFloat, ncclSum, comm, stream));
  sync(comm);
}

/// One rank's part of the one-sided ordering check (emulated_rma_test.cc, and across hosts
/// emulated_rma_net_test.cc), on windows of at least `count` floats: each rank puts to the next
/// the result of an all-reduce enqueued before the put on the same stream, then overwrites that
/// source on the stream (the put carried it already), waits for its own put on the stream, and
/// an all-reduce after the wait reads the window; then the same inside a group, where the put is
/// enqueued at ncclGroupEnd after the group's all-reduce and carries its result.
inline void expectPutsFollowStream(int rank, int n, ncclComm_t comm, ncclWindow_t win, char* window, size_t count) {
  const cudaStream_t stream = streamOf(rank);
  std::vector<float> in(count), sum(count), out(count);
  for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>((rank + 1) * (i % 17));
  EXPECT_OK(ncclAllReduce(in.data(), sum.data(), count, ncclFloat, ncclSum, comm, stream));
  EXPECT_OK(ncclPutSignal(sum.data(), count, ncclFloat, (rank + 1) % n, win, 0, 0, 1, 0, comm, stream));
  EXPECT_OK(ncclAllReduce(in.data(), sum.data(), count, ncclFloat, ncclMax, comm, stream));
  ncclWaitSignalDesc_t d = {1, (rank + n - 1) % n, 0, 1};
  EXPECT_OK(ncclWaitSignal(1, &d, comm, stream));
  EXPECT_OK(ncclAllReduce(window, out.data(), count, ncclFloat, ncclSum, comm, stream));
  sync(comm);
  const float ranksSum = n * (n + 1) / 2.0f;
  size_t wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    wrong += reinterpret_cast<const float*>(window)[i] != ranksSum * (i % 17);
    wrong += out[i] != n * ranksSum * (i % 17);
  }
  expect(wrong == 0, std::to_string(wrong) + " elements wrong");
  for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>((rank + 1) * (i % 13));
  EXPECT_OK(ncclGroupStart());
  EXPECT_OK(ncclPutSignal(sum.data(), count, ncclFloat, (rank + 1) % n, win, 0, 0, 1, 0, comm, stream));
  EXPECT_OK(ncclAllReduce(in.data(), sum.data(), count, ncclFloat, ncclSum, comm, stream));
  EXPECT_OK(ncclWaitSignal(1, &d, comm, stream));
  EXPECT_OK(ncclGroupEnd());
  sync(comm);
  wrong = 0;
  for (size_t i = 0; i < count; ++i) wrong += reinterpret_cast<const float*>(window)[i] != ranksSum * (i % 13);
  expect(wrong == 0, std::to_string(wrong) + " elements wrong after the group");
}

}  // namespace braid::test
