// One group's collectives on a GPU, gathered to share one kernel launch: the kernel's block of
// channel c runs work i of every collective in turn (works[i * nChannels + c]). Collectives
// join while they need the same kernel (the byte copy, or one reduction's operator and type),
// stream, channel count and ring handles, and touch no memory an earlier one of the launch
// writes (nor write what it reads): a block runs its works in order, but the channels of one
// work do not wait for each other, so such a collective waits for a launch of its own, which
// starts after the earlier one has ended on every channel.
#pragma once

#include <array>
#include <vector>

#include "comm/config.h"
#include "kernels/work.h"

namespace braid::datapath {

/// Bytes [begin, end) of a user buffer (empty for a null buffer).
struct ByteRange {
  const char* begin = nullptr;
  const char* end = nullptr;
  static ByteRange of(const void* p, uint64_t bytes);
  bool overlaps(const ByteRange& o) const { return begin < o.end && o.begin < end; }
};

/// What a collective's launch needs beside its works.
struct LaunchKey {
  void* stream;
  int nChannels;
  bool copy;  ///< the byte kernel (red and dtype unused)
  int red;
  int dtype;
};

class LaunchBatch {
 public:
  /// Most collectives one launch runs.
  static constexpr int kMaxWorks = 64;

  bool empty() const { return nWorks_ == 0; }
  int size() const { return nWorks_; }
  const LaunchKey& key() const { return key_; }
  const kernels::RingHandle* rings() const { return rings_.data(); }

  /// Whether a collective (its launch key, key.nChannels ring handles, and the bytes it reads
  /// and writes) may join.
  bool accepts(const LaunchKey& key, const kernels::RingHandle* rings, const ByteRange& reads,
               const ByteRange& writes) const;
  /// Adds its key.nChannels works (the caller asked accepts(), or the batch is empty).
  void add(const LaunchKey& key, const kernels::RingHandle* rings, const ByteRange& reads, const ByteRange& writes,
           const kernels::CollWork* works);
  /// The works, as the kernel reads them; the batch is empty again (key() and rings() stay
  /// as they were until the next add).
  std::vector<kernels::CollWork> take();

 private:
  LaunchKey key_{};
  std::array<kernels::RingHandle, kMaxChannels> rings_{};
  std::vector<kernels::CollWork> works_;
  std::vector<ByteRange> reads_, writes_;
  int nWorks_ = 0;
};

}  // namespace braid::datapath
