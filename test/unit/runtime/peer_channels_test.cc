// How a communicator's sends and receives use channels (datapath/data_path.h): the
// connections a peer's large message splits over, from the backend, the knobs, the rank count
// and whether the ranks span hosts; and the parts a message of each size is cut into.
#include <catch2/catch.hpp>

#include "datapath/data_path.h"

using braid::datapath::DataPathSettings;
using braid::datapath::kPeerPartMinBytes;
using braid::datapath::peerChannels;
using braid::datapath::peerPartBytes;

namespace {
DataPathSettings withChannels(int maxChannels) {
  DataPathSettings s;
  s.limits.maxChannels = maxChannels;
  return s;
}
}  // namespace

TEST_CASE("peer channels: 4 a peer on a GPU, 1 on the host, bounded by the knobs and the ranks", "[unit][runtime]") {
  DataPathSettings s = withChannels(32);
  CHECK(peerChannels(s, 2, false, true).perPeer == 4);
  CHECK(peerChannels(s, 2, false, true).total == 32);
  CHECK(peerChannels(s, 2, false, false).perPeer == 1);
  CHECK(peerChannels(s, 8, false, true).perPeer == 4);   // 4 x 8 = 32 <= 4 x 32
  CHECK(peerChannels(s, 33, false, true).perPeer == 2);  // 4 x 33 > 128: halved
  CHECK(peerChannels(s, 65, false, true).perPeer == 1);
  CHECK(peerChannels(s, 2, true, true).perPeer == 2);  // NCCL_NCHANNELS_PER_NET_PEER's default
  s.netPeerChannels = 1;
  CHECK(peerChannels(s, 2, true, true).perPeer == 1);
  CHECK(peerChannels(s, 2, false, true).perPeer == 4);  // (one host: no network peer)

  s = withChannels(2);  // the collectives' channels bound the sends' (a GPU shared by ranks)
  CHECK(peerChannels(s, 2, false, true).perPeer == 2);
  CHECK(peerChannels(s, 2, false, true).total == 2);
  s.minP2pChannels = 8;  // NCCL_MIN_P2P_NCHANNELS raises the total
  CHECK(peerChannels(s, 2, false, true).total == 8);
  CHECK(peerChannels(s, 2, false, true).perPeer == 4);
  s = withChannels(32);
  s.maxP2pChannels = 3;  // NCCL_MAX_P2P_NCHANNELS lowers it; a peer's count is a power of two
  CHECK(peerChannels(s, 2, false, true).total == 3);
  CHECK(peerChannels(s, 2, false, true).perPeer == 2);
  s = withChannels(32);
  s.peerChannels = 6;  // BRAID_P2P_CHANNELS_PER_PEER, also on the host
  CHECK(peerChannels(s, 2, false, false).perPeer == 4);
  s.peerChannels = 16;
  CHECK(peerChannels(s, 2, false, true).perPeer == 16);
  CHECK(peerChannels(s, 3, false, true).perPeer == 16);  // 48 <= 128
  CHECK(peerChannels(s, 9, false, true).perPeer == 8);   // 16 x 9 > 128, 8 x 9 <= 128
}

TEST_CASE("peer parts: 512-byte multiples of at least 128 KiB that cover the message", "[unit][runtime]") {
  CHECK(peerPartBytes(0, 4) == 0);
  CHECK(peerPartBytes(1, 4) == 1);
  CHECK(peerPartBytes(2 * kPeerPartMinBytes - 1, 4) == 2 * kPeerPartMinBytes - 1);  // one part
  CHECK(peerPartBytes(2 * kPeerPartMinBytes, 4) == kPeerPartMinBytes);
  CHECK(peerPartBytes(2 * kPeerPartMinBytes + 1, 4) == kPeerPartMinBytes + 512);
  CHECK(peerPartBytes(1 << 20, 4) == (1 << 18));
  CHECK(peerPartBytes(1 << 20, 1) == (1 << 20));
  for (int perPeer : {1, 2, 3, 4, 8, 64}) {
    for (uint64_t bytes : {uint64_t{0}, uint64_t{7}, kPeerPartMinBytes - 1, kPeerPartMinBytes, 3 * kPeerPartMinBytes + 5,
                           uint64_t{1} << 20, (uint64_t{1} << 20) + 1, (uint64_t{64} << 20) + 3, uint64_t{1} << 33}) {
      INFO("perPeer " << perPeer << ", bytes " << bytes);
      const uint64_t part = peerPartBytes(bytes, perPeer);
      if (bytes < 2 * kPeerPartMinBytes || perPeer == 1) {
        CHECK(part == bytes);
        continue;
      }
      CHECK(part % 512 == 0);
      CHECK(part >= kPeerPartMinBytes);
      const uint64_t parts = (bytes + part - 1) / part;
      CHECK(parts <= static_cast<uint64_t>(perPeer));
      CHECK(parts >= 2);
      CHECK(bytes - (parts - 1) * part > 0);  // the last part is not empty
    }
  }
}
