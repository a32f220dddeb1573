// Reading a user's ncclConfig_t: the fields its size and version cover, NCCL 2.30.7's checks.
#include <catch2/catch.hpp>
#include <cstring>

#include "comm/config.h"
#include "core/status.h"

using namespace braid;

namespace {

/// A 2.30.7 config in a buffer with room behind it, filled as an older header's program would.
struct ConfigBuffer {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  int after[4] = {-7, -7, -7, -7};  // what a reader past the struct's size would see
};

std::string failureText(const ncclConfig_t* cfg) {
  try {
    readConfig(cfg, nullptr, true);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("config: the 2.29 and 2.30 fields are read and checked as NCCL does", "[config]") {
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  CHECK(sizeof(ncclConfig_t) == 96);
  CommConfig c = readConfig(&cfg, nullptr, true);
  CHECK(c.graphUsageMode == -1);
  CHECK(c.numRmaCtx == 1);
  CHECK(c.maxP2pPeers == 0);
  CHECK(c.graphStreamOrdering == 1);

  cfg.graphUsageMode = 1;
  cfg.numRmaCtx = 4;
  cfg.maxP2pPeers = 3;
  cfg.graphStreamOrdering = 0;
  c = readConfig(&cfg, nullptr, true);
  CHECK(c.graphUsageMode == 1);
  CHECK(c.numRmaCtx == 4);
  CHECK(c.maxP2pPeers == 3);
  CHECK(c.graphStreamOrdering == 0);

  // Stream ordering cannot be turned off while graphs and eager work mix (mode 2): NCCL keeps it.
  cfg.graphUsageMode = 2;
  CHECK(readConfig(&cfg, nullptr, true).graphStreamOrdering == 1);

  ncclConfig_t bad = NCCL_CONFIG_INITIALIZER;
  bad.graphUsageMode = 3;
  CHECK(failureText(&bad) == "config.graphUsageMode is 3; it must be between 0 and 2");
  bad = NCCL_CONFIG_INITIALIZER;
  bad.numRmaCtx = -1;
  CHECK(failureText(&bad) == "config.numRmaCtx is -1; it must be between 0 and 64");
  bad = NCCL_CONFIG_INITIALIZER;
  bad.maxP2pPeers = 0;
  CHECK(failureText(&bad) == "config.maxP2pPeers is 0; it must be between 1 and 2147483647");
  bad = NCCL_CONFIG_INITIALIZER;
  bad.graphStreamOrdering = 2;
  CHECK(failureText(&bad) == "config.graphStreamOrdering is 2; it must be between 0 and 1");
}

TEST_CASE("config: a struct from an older header is read by its size and version only", "[config]") {
  ConfigBuffer b;
  // NVIDIA 2.28.9: 80 bytes, version 22809. The bytes behind it are never read.
  b.config.size = 80;
  b.config.version = NCCL_VERSION(2, 28, 9);
  b.config.graphUsageMode = b.config.numRmaCtx = b.config.maxP2pPeers = b.config.graphStreamOrdering = -7;
  CommConfig c = readConfig(&b.config, nullptr, true);
  CHECK(c.numRmaCtx == 1);
  CHECK(c.graphStreamOrdering == 1);

  // 2.29: 88 bytes; graphUsageMode and numRmaCtx are read, the rest is not there.
  b.config.size = 88;
  b.config.version = NCCL_VERSION(2, 29, 7);
  b.config.graphUsageMode = 0;
  b.config.numRmaCtx = 2;
  c = readConfig(&b.config, nullptr, true);
  CHECK(c.graphUsageMode == 0);
  CHECK(c.numRmaCtx == 2);
  CHECK(c.maxP2pPeers == 0);

  // 2.30.3: 96 bytes (maxP2pPeers and 4 bytes of padding): the padding is not graphStreamOrdering.
  b.config.size = 96;
  b.config.version = NCCL_VERSION(2, 30, 3);
  b.config.maxP2pPeers = 5;
  c = readConfig(&b.config, nullptr, true);
  CHECK(c.maxP2pPeers == 5);
  CHECK(c.graphStreamOrdering == 1);

  // The same bytes from a 2.29 program: its struct has no maxP2pPeers either.
  b.config.version = NCCL_VERSION(2, 29, 7);
  CHECK(readConfig(&b.config, nullptr, true).maxP2pPeers == 0);
}
