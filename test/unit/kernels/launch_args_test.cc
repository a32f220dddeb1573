// Launch arguments in a kernel's parameters (kernels/launch_args.h): what the CUDA launcher
// packs, the kernels' accessors find again, byte for byte, with each work's peer handles where
// its offsets say; what does not fit, or maps a receiver's buffer, is refused untouched.
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "kernels/launch_args.h"

using namespace braid::kernels;

namespace {

ConnHandle handle(int tag) {
  ConnHandle h{};
  std::memset(&h, tag, sizeof h);
  return h;
}

bool same(const void* a, const void* b, size_t n) { return std::memcmp(a, b, n) == 0; }

}  // namespace

TEST_CASE("launch args: a collective's works, rings and peer handles packed and found again", "[unit][kernels]") {
  for (int nRanks : {1, 2, 3, 5}) {
    for (int nChannels : {1, 2, 4, 8, 16, 32}) {
      for (int nWorks : {1, 2}) {
        INFO(nRanks << " ranks, " << nChannels << " channels, " << nWorks << " works");
        const int n = nWorks * nChannels;
        std::vector<ConnHandle> send, recv;
        for (int i = 0; i < n * nRanks; ++i) send.push_back(handle(1 + i % 200)), recv.push_back(handle(201 + i % 50));
        std::vector<CollWork> works(n);
        for (int i = 0; i < n; ++i) {
          std::memset(&works[i], 0, sizeof(CollWork));
          works[i].channelOffset = 1000 + i;
          works[i].channelCount = 77 * i;
          if (i % 2 == 1) {  // every other work with peer connections
            works[i].peerSend = send.data() + i * nRanks;
            works[i].peerRecv = recv.data() + i * nRanks;
          }
        }
        std::vector<RingHandle> rings(nChannels);
        for (int c = 0; c < nChannels; ++c) {
          std::memset(&rings[c], 0, sizeof(RingHandle));
          rings[c].send = handle(10 + c);
          rings[c].nRanks = nRanks;
          rings[c].index = c % nRanks;
        }
        int withPeers = 0;
        for (const CollWork& w : works) withPeers += w.peerSend != nullptr;
        InlineArgs args;
        const bool fits = inlineCollectiveBytes(n, nChannels, withPeers, nRanks) <= kInlineArgBytes;
        REQUIRE(packCollective(works.data(), n, rings.data(), nChannels, nRanks, &args) == fits);
        if (!fits) continue;
        const CollWork* w = inlineWorks(args.bytes);
        const RingHandle* r = inlineRings(args.bytes, n);
        for (int c = 0; c < nChannels; ++c) CHECK(same(&r[c], &rings[c], sizeof(RingHandle)));
        for (int i = 0; i < n; ++i) {
          CollWork got = w[i];
          got.peerSend = inlinePeers(args.bytes, got.peerSend);
          got.peerRecv = inlinePeers(args.bytes, got.peerRecv);
          CHECK(got.channelOffset == works[i].channelOffset);
          CHECK(got.channelCount == works[i].channelCount);
          if (works[i].peerSend == nullptr) {
            CHECK(got.peerSend == nullptr);
            CHECK(got.peerRecv == nullptr);
            continue;
          }
          REQUIRE(got.peerSend != nullptr);
          CHECK(reinterpret_cast<const unsigned char*>(got.peerSend) >= args.bytes);
          CHECK(reinterpret_cast<const unsigned char*>(got.peerRecv + nRanks) <= args.bytes + kInlineArgBytes);
          CHECK(same(got.peerSend, works[i].peerSend, nRanks * sizeof(ConnHandle)));
          CHECK(same(got.peerRecv, works[i].peerRecv, nRanks * sizeof(ConnHandle)));
        }
      }
    }
  }
}

TEST_CASE("launch args: a launch that does not fit is refused, nothing written", "[unit][kernels]") {
  const int nChannels = 1 + static_cast<int>(kInlineArgBytes / (sizeof(CollWork) + sizeof(RingHandle)));
  std::vector<CollWork> works(nChannels);
  std::vector<RingHandle> rings(nChannels);
  for (auto& w : works) std::memset(&w, 0, sizeof w);
  for (auto& r : rings) std::memset(&r, 0, sizeof r);
  InlineArgs args;
  std::memset(args.bytes, 0xab, sizeof args.bytes);
  CHECK_FALSE(packCollective(works.data(), nChannels, rings.data(), nChannels, 2, &args));
  CHECK(args.bytes[0] == 0xab);
  CHECK(packCollective(works.data(), nChannels - 1, rings.data(), nChannels - 1, 2, &args));
  // 8 ranks' handles both ways for 2 works: 3.3 KiB of handles alone, beyond a 4 KiB block
  std::vector<ConnHandle> peers(8, handle(3));
  works[0].peerSend = works[0].peerRecv = works[1].peerSend = works[1].peerRecv = peers.data();
  CHECK_FALSE(packCollective(works.data(), 2, rings.data(), 2, 8, &args, kSmallInlineArgBytes));
  CHECK(packCollective(works.data(), 2, rings.data(), 2, 8, &args) == (kInlineArgBytes > kSmallInlineArgBytes));
}

TEST_CASE("launch args: 32 channels fit the large block (CUDA 12.1, sm_70), 8 the small one; older drivers get 4 KiB",
          "[unit][kernels]") {
  // The parameter block is what nvcc accepts: 32,764 bytes in all from CUDA 12.1 for sm_70 and
  // later (this build's: BRAID_KERNEL_PARAM_BYTES), 4 KiB before.
  STATIC_REQUIRE(kParamPrefixBytes + sizeof(InlineArgs) <= BRAID_KERNEL_PARAM_BYTES);
  STATIC_REQUIRE(kParamPrefixBytes + kSmallInlineArgBytes <= 4096);
  CHECK(inlineArgLimit(false, 13000, 9) == 0);                       // BRAID_INLINE_LAUNCH_ARGS=0
  CHECK(inlineArgLimit(true, 13000, 9) == kInlineArgBytes);          // CUDA 13 driver, Hopper
  CHECK(inlineArgLimit(true, 12010, 7) == kInlineArgBytes);          // the first driver and GPU that can
  CHECK(inlineArgLimit(true, 12000, 9) == kSmallInlineArgBytes);     // a 12.0 driver
  CHECK(inlineArgLimit(true, 13000, 6) == kSmallInlineArgBytes);     // Pascal
  // One AllReduce work a channel (works plus rings: 408 bytes a channel, issue 39).
  const size_t perChannel = sizeof(CollWork) + sizeof(RingHandle);
  INFO(perChannel << " bytes a channel; block " << kInlineArgBytes);
  for (int nChannels : {8, 16, 32}) {
    std::vector<CollWork> works(nChannels);
    std::vector<RingHandle> rings(nChannels);
    for (int c = 0; c < nChannels; ++c) {
      std::memset(&works[c], 0, sizeof(CollWork));
      works[c].channelOffset = 10 * c;
      std::memset(&rings[c], 0, sizeof(RingHandle));
      rings[c].index = c;
    }
    InlineArgs args;
    CHECK(packCollective(works.data(), nChannels, rings.data(), nChannels, 2, &args, kSmallInlineArgBytes) == (nChannels <= 8));
    if (kInlineArgBytes == kSmallInlineArgBytes) continue;  // (a build whose CUDA has only the small block)
    REQUIRE(packCollective(works.data(), nChannels, rings.data(), nChannels, 2, &args));
    for (int c = 0; c < nChannels; ++c) {
      CHECK(inlineWorks(args.bytes)[c].channelOffset == static_cast<size_t>(10 * c));
      CHECK(inlineRings(args.bytes, nChannels)[c].index == c);
    }
  }
}

TEST_CASE("launch args: a group's sends and receives packed and found again; mapped ones not packed", "[unit][kernels]") {
  for (int nQueues : {1, 2, 3, 7}) {
    INFO(nQueues << " queues");
    std::vector<int> starts(nQueues + 1);
    std::vector<PeerOp> ops;
    for (int q = 0; q < nQueues; ++q) {
      starts[q] = static_cast<int>(ops.size());
      for (int k = 0; k <= q % 2; ++k) {
        PeerOp op{};
        op.bytes = 1000 * q + k;
        op.isSend = (q + k) % 2 == 0;
        ops.push_back(op);
      }
    }
    starts[nQueues] = static_cast<int>(ops.size());
    const bool fits = roundUp16((nQueues + 1) * sizeof(int)) + ops.size() * sizeof(PeerOp) <= kInlineArgBytes;
    InlineArgs args;
    REQUIRE(packPeers(ops.data(), starts.data(), nQueues, &args) == fits);
    if (!fits) continue;
    CHECK(same(inlineStarts(args.bytes), starts.data(), starts.size() * sizeof(int)));
    CHECK(same(inlineOps(args.bytes, nQueues), ops.data(), ops.size() * sizeof(PeerOp)));
    MappedBuffer table{};
    ops.back().mapped = &table;
    CHECK_FALSE(packPeers(ops.data(), starts.data(), nQueues, &args));
  }
}
