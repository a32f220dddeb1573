#include "comm/config.h"

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstring>

#include "core/params.h"
#include "core/status.h"

namespace braid {

namespace {

constexpr unsigned kConfigMagic = 0xcafebeef;

// NCCL 2.30.7's layout on LP64 (the abi suite compares every offset with NVIDIA's header; these
// are the ones forgetFieldsNewerThan and older callers' sizes depend on).
static_assert(sizeof(ncclConfig_t) == 96, "ncclConfig_v23000 is 96 bytes");
static_assert(offsetof(ncclConfig_t, nvlinkCentricSched) == 76, "2.28.9's struct ends at 80 bytes");
static_assert(offsetof(ncclConfig_t, graphUsageMode) == 80 && offsetof(ncclConfig_t, numRmaCtx) == 84,
              "2.29's fields");
static_assert(offsetof(ncclConfig_t, maxP2pPeers) == 88 && offsetof(ncclConfig_t, graphStreamOrdering) == 92,
              "2.30's fields");

/// Checks an int field: UNDEF keeps `current`, else the value must lie in [lo, hi].
int intField(const char* name, int value, int current, int lo, int hi) {
  if (value == NCCL_CONFIG_UNDEF_INT) return current;
  if (value < lo || value > hi) {
    fail(ncclInvalidArgument, "config.%s is %d; it must be between %d and %d", name, value, lo, hi);
  }
  return value;
}

/// A struct's size can cover a field its version does not have (2.30.3's maxP2pPeers left 4
/// bytes of padding where 2.30.5 put graphStreamOrdering), so fields younger than the caller's
/// header are reset to undefined, as NCCL does.
void forgetFieldsNewerThan(unsigned version, ncclConfig_t* cfg) {
  const ncclConfig_t undefined = NCCL_CONFIG_INITIALIZER;
  if (version < NCCL_VERSION(2, 29, 0)) {
    cfg->graphUsageMode = undefined.graphUsageMode;
    cfg->numRmaCtx = undefined.numRmaCtx;
  }
  if (version < NCCL_VERSION(2, 30, 0)) cfg->maxP2pPeers = undefined.maxP2pPeers;
  if (version < NCCL_VERSION(2, 30, 5)) cfg->graphStreamOrdering = undefined.graphStreamOrdering;
}

bool boolField(const char* name, int value, bool current) {
  return intField(name, value, current ? 1 : 0, 0, 1) != 0;
}

/// NCCL's environment overrides of the 2.29/2.30 fields (its envConfigOverride): a variable
/// that is set replaces the config's value; out-of-range settings are ignored, as NCCL does.
void applyEnvironment(CommConfig& c) {
  params::Store& store = params::process();
  const int64_t contexts = store.integer("NCCL_NUM_RMA_CTX");
  if (contexts >= 0) c.numRmaCtx = static_cast<int>(std::min<int64_t>(contexts, kMaxRmaContexts));
  const int64_t peers = store.integer("NCCL_P2P_MAX_PEERS");
  if (peers > 0) c.maxP2pPeers = static_cast<int>(std::min<int64_t>(peers, INT_MAX));
  const int64_t ordering = store.integer("NCCL_GRAPH_STREAM_ORDERING");
  if (ordering == 0 || ordering == 1) c.graphStreamOrdering = static_cast<int>(ordering);
  if (c.graphStreamOrdering == 0 && c.graphUsageMode == 2) {
    // NCCL refuses this pair with a warning and keeps the ordering; so does Braid.
    c.graphStreamOrdering = 1;
  }
}

CommConfig readUserConfig(const ncclConfig_t* user, const CommConfig* inherited, bool defaultBlocking) {
  CommConfig c;
  c.blocking = defaultBlocking;
  if (inherited != nullptr) c = *inherited;
  if (user == nullptr) return c;

  if (user->magic != kConfigMagic) {
    fail(ncclInvalidArgument, "config.magic is %#x, expected %#x: initialise the config with NCCL_CONFIG_INITIALIZER",
         user->magic, kConfigMagic);
  }
  constexpr size_t kHeader = offsetof(ncclConfig_t, blocking);
  if (user->size < kHeader || user->size > (1u << 20)) {
    fail(ncclInvalidArgument, "config.size is %zu, not the size of any ncclConfig_t", user->size);
  }
  if (user->version < NCCL_VERSION(2, 14, 0)) {
    fail(ncclInvalidArgument, "config.version is %u; configs exist since NCCL 2.14 (21400)", user->version);
  }
  // Start from an all-undefined struct and copy only what the caller's struct covers: an
  // older header's struct is shorter, a newer one's extra fields are not ours to read.
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  std::memcpy(&cfg, user, std::min(user->size, sizeof(cfg)));
  forgetFieldsNewerThan(user->version, &cfg);
  noteCallerVersion(user->version);

  c.blocking = boolField("blocking", cfg.blocking, c.blocking);
  c.cgaClusterSize = intField("cgaClusterSize", cfg.cgaClusterSize, c.cgaClusterSize, 0, 8);
  c.minCTAs = intField("minCTAs", cfg.minCTAs, c.minCTAs, 1, kMaxChannels);
  c.maxCTAs = intField("maxCTAs", cfg.maxCTAs, c.maxCTAs, 1, kMaxChannels);
  if (cfg.minCTAs != NCCL_CONFIG_UNDEF_INT && cfg.maxCTAs == NCCL_CONFIG_UNDEF_INT && c.maxCTAs < c.minCTAs) {
    c.maxCTAs = c.minCTAs;
  }
  if (c.minCTAs > c.maxCTAs) {
    fail(ncclInvalidArgument, "config.minCTAs (%d) is larger than config.maxCTAs (%d)", c.minCTAs, c.maxCTAs);
  }
  if (cfg.netName != NCCL_CONFIG_UNDEF_PTR) c.netName = cfg.netName;
  c.splitShare = boolField("splitShare", cfg.splitShare, c.splitShare);
  c.trafficClass = intField("trafficClass", cfg.trafficClass, c.trafficClass, 0, 255);
  if (cfg.commName != NCCL_CONFIG_UNDEF_PTR) c.commName = cfg.commName;
  c.collnetEnable = intField("collnetEnable", cfg.collnetEnable, c.collnetEnable, 0, 1);
  c.ctaPolicy = intField("CTAPolicy", cfg.CTAPolicy, c.ctaPolicy, NCCL_CTA_POLICY_DEFAULT, NCCL_CTA_POLICY_ZERO);
  c.shrinkShare = boolField("shrinkShare", cfg.shrinkShare, c.shrinkShare);
  c.nvlsCTAs = intField("nvlsCTAs", cfg.nvlsCTAs, c.nvlsCTAs, 1, kMaxChannels);
  c.nChannelsPerNetPeer = intField("nChannelsPerNetPeer", cfg.nChannelsPerNetPeer, c.nChannelsPerNetPeer, 1, kMaxChannels);
  c.nvlinkCentricSched = intField("nvlinkCentricSched", cfg.nvlinkCentricSched, c.nvlinkCentricSched, 0, 1);
  c.graphUsageMode = intField("graphUsageMode", cfg.graphUsageMode, c.graphUsageMode, 0, 2);
  c.numRmaCtx = intField("numRmaCtx", cfg.numRmaCtx, c.numRmaCtx, 0, kMaxRmaContexts);
  c.maxP2pPeers = intField("maxP2pPeers", cfg.maxP2pPeers, c.maxP2pPeers, 1, INT_MAX);
  c.graphStreamOrdering = intField("graphStreamOrdering", cfg.graphStreamOrdering, c.graphStreamOrdering, 0, 1);
  return c;
}

}  // namespace

CommConfig readConfig(const ncclConfig_t* user, const CommConfig* inherited, bool defaultBlocking) {
  CommConfig c = readUserConfig(user, inherited, defaultBlocking);
  applyEnvironment(c);
  return c;
}

}  // namespace braid
