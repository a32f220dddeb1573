// A communicator's configuration, read from a user's ncclConfig_t.
#pragma once

#include <nccl.h>

#include <string>

namespace braid {

/// The validated configuration. Fields the user left undefined hold Braid's defaults.
struct CommConfig {
  bool blocking = true;
  int cgaClusterSize = 4;
  int minCTAs = 1;   ///< lower bound on channels
  int maxCTAs = 32;  ///< upper bound on channels
  std::string netName;
  bool splitShare = false;
  int trafficClass = -1;
  std::string commName;
  int collnetEnable = 0;
  int ctaPolicy = NCCL_CTA_POLICY_DEFAULT;
  bool shrinkShare = false;
  int nvlsCTAs = -1;
  int nChannelsPerNetPeer = -1;
  int nvlinkCentricSched = 0;
  // NCCL 2.29/2.30 fields; a struct from an older nccl.h leaves them at these defaults.
  int graphUsageMode = -1;      ///< 0: no graphs, 1: graphs only, 2: both mixed; -1: unset (NCCL's default)
  int numRmaCtx = 1;            ///< contexts of one-sided operations (ncclPutSignal's ctx)
  int maxP2pPeers = 0;          ///< peers a rank exchanges point-to-point with at most; 0: all
  int graphStreamOrdering = 1;  ///< 1: graph-captured operations are ordered with the stream
};

/// Reads and checks `user` (which may be NULL: defaults, or `inherited` when given). Accepts
/// structs from older and newer nccl.h versions: only the fields its size covers are read.
/// Throws ncclInvalidArgument naming the field and value of the first invalid entry. Then NCCL's
/// environment overrides of the 2.29/2.30 fields apply (NCCL_NUM_RMA_CTX, NCCL_P2P_MAX_PEERS,
/// NCCL_GRAPH_STREAM_ORDERING).
CommConfig readConfig(const ncclConfig_t* user, const CommConfig* inherited, bool defaultBlocking);

/// The most channels a communicator may use.
constexpr int kMaxChannels = 64;
/// The most one-sided operation contexts (config.numRmaCtx, NCCL_NUM_RMA_CTX) a communicator takes.
constexpr int kMaxRmaContexts = 64;

}  // namespace braid
