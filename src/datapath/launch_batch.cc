#include "datapath/launch_batch.h"

#include <cstring>

namespace braid::datapath {

ByteRange ByteRange::of(const void* p, uint64_t bytes) {
  if (p == nullptr || bytes == 0) return {};
  const char* begin = static_cast<const char*>(p);
  return {begin, begin + bytes};
}

bool LaunchBatch::accepts(const LaunchKey& key, const kernels::RingHandle* rings, const ByteRange& reads,
                          const ByteRange& writes) const {
  if (nWorks_ == 0 || nWorks_ >= kMaxWorks) return false;
  if (key.stream != key_.stream || key.nChannels != key_.nChannels || key.copy != key_.copy) return false;
  if (!key.copy && (key.red != key_.red || key.dtype != key_.dtype)) return false;
  if (std::memcmp(rings, rings_.data(), key.nChannels * sizeof(kernels::RingHandle)) != 0) return false;
  for (const ByteRange& w : writes_)
    if (w.overlaps(reads) || w.overlaps(writes)) return false;
  for (const ByteRange& r : reads_)
    if (r.overlaps(writes)) return false;
  return true;
}

void LaunchBatch::add(const LaunchKey& key, const kernels::RingHandle* rings, const ByteRange& reads,
                      const ByteRange& writes, const kernels::CollWork* works) {
  if (nWorks_ == 0) {
    key_ = key;
    std::memcpy(rings_.data(), rings, key.nChannels * sizeof(kernels::RingHandle));
  }
  works_.insert(works_.end(), works, works + key.nChannels);
  reads_.push_back(reads);
  writes_.push_back(writes);
  ++nWorks_;
}

std::vector<kernels::CollWork> LaunchBatch::take() {
  std::vector<kernels::CollWork> works;
  works.swap(works_);
  reads_.clear();
  writes_.clear();
  nWorks_ = 0;
  return works;
}

}  // namespace braid::datapath
