// LaunchBatch: which collectives of a group may share one kernel launch on a GPU, and the works
// in the order the kernel reads them.
#include <catch2/catch.hpp>
#include <vector>

#include "datapath/launch_batch.h"

using namespace braid;
using datapath::ByteRange;
using datapath::LaunchBatch;
using datapath::LaunchKey;

namespace {

char memory[1 << 16];  // the "user buffers"

std::vector<kernels::RingHandle> ringsOf(int nChannels, int index) {
  std::vector<kernels::RingHandle> rings(nChannels);
  for (auto& r : rings) r = kernels::RingHandle{{}, {}, 4, index};
  return rings;
}

std::vector<kernels::CollWork> worksTagged(int nChannels, uint64_t tag) {
  std::vector<kernels::CollWork> works(nChannels);
  for (int c = 0; c < nChannels; ++c) works[c].channelOffset = tag * 100 + c;
  return works;
}

}  // namespace

TEST_CASE("LaunchBatch: collectives of one kernel, stream, channel count and ring share a launch", "[batch]") {
  LaunchBatch b;
  const auto rings = ringsOf(2, 1);
  const LaunchKey sum{nullptr, 2, false, 0, 7};
  CHECK_FALSE(b.accepts(sum, rings.data(), {}, {}));  // (an empty batch is started, not joined)
  b.add(sum, rings.data(), ByteRange::of(memory, 100), ByteRange::of(memory + 100, 100), worksTagged(2, 1).data());
  CHECK(b.accepts(sum, rings.data(), ByteRange::of(memory + 200, 100), ByteRange::of(memory + 300, 100)));
  CHECK(b.accepts(sum, rings.data(), ByteRange::of(memory + 200, 100), ByteRange::of(memory + 200, 100)));  // in place
  CHECK_FALSE(b.accepts(LaunchKey{&b, 2, false, 0, 7}, rings.data(), {}, {}));   // another stream
  CHECK_FALSE(b.accepts(LaunchKey{nullptr, 1, false, 0, 7}, rings.data(), {}, {}));  // other channels
  CHECK_FALSE(b.accepts(LaunchKey{nullptr, 2, true, 0, 0}, rings.data(), {}, {}));   // the copy kernel
  CHECK_FALSE(b.accepts(LaunchKey{nullptr, 2, false, 2, 7}, rings.data(), {}, {}));  // another operator
  CHECK_FALSE(b.accepts(LaunchKey{nullptr, 2, false, 0, 8}, rings.data(), {}, {}));  // another type
  CHECK_FALSE(b.accepts(sum, ringsOf(2, 2).data(), {}, {}));                       // other ring handles
  LaunchBatch copies;
  copies.add(LaunchKey{nullptr, 2, true, 0, 7}, rings.data(), {}, {}, worksTagged(2, 1).data());
  CHECK(copies.accepts(LaunchKey{nullptr, 2, true, 3, 9}, rings.data(), {}, {}));  // (the byte kernel: any type)
}

TEST_CASE("LaunchBatch: a collective touching what an earlier one writes waits for its own launch", "[batch]") {
  LaunchBatch b;
  const auto rings = ringsOf(1, 0);
  const LaunchKey key{nullptr, 1, false, 0, 7};
  // The first reads [0, 100) and writes [100, 200).
  b.add(key, rings.data(), ByteRange::of(memory, 100), ByteRange::of(memory + 100, 100), worksTagged(1, 1).data());
  CHECK_FALSE(b.accepts(key, rings.data(), ByteRange::of(memory + 150, 10), ByteRange::of(memory + 400, 10)));  // reads its output
  CHECK_FALSE(b.accepts(key, rings.data(), ByteRange::of(memory + 400, 10), ByteRange::of(memory + 199, 10)));  // writes its output
  CHECK_FALSE(b.accepts(key, rings.data(), ByteRange::of(memory + 400, 10), ByteRange::of(memory + 50, 10)));   // writes its input
  CHECK(b.accepts(key, rings.data(), ByteRange::of(memory + 50, 10), ByteRange::of(memory + 200, 10)));  // reads its input, writes next to it
  CHECK(b.accepts(key, rings.data(), ByteRange::of(nullptr, 64), ByteRange::of(memory + 300, 0)));  // null and empty buffers
}

TEST_CASE("LaunchBatch: works by work then channel, at most kMaxWorks, empty after take", "[batch]") {
  LaunchBatch b;
  const auto rings = ringsOf(3, 0);
  const LaunchKey key{nullptr, 3, true, 0, 0};
  for (int i = 0; i < LaunchBatch::kMaxWorks; ++i) {
    const ByteRange out = ByteRange::of(memory + 10 * i, 10);
    if (i > 0) REQUIRE(b.accepts(key, rings.data(), {}, out));
    b.add(key, rings.data(), {}, out, worksTagged(3, i).data());
  }
  CHECK_FALSE(b.accepts(key, rings.data(), {}, ByteRange::of(memory + 10000, 10)));  // full
  CHECK(b.size() == LaunchBatch::kMaxWorks);
  const std::vector<kernels::CollWork> works = b.take();
  REQUIRE(works.size() == 3u * LaunchBatch::kMaxWorks);
  for (int i = 0; i < LaunchBatch::kMaxWorks; ++i)
    for (int c = 0; c < 3; ++c) CHECK(works[i * 3 + c].channelOffset == uint64_t(i) * 100 + c);
  CHECK(b.empty());
  CHECK_FALSE(b.accepts(key, rings.data(), {}, {}));
}
