#include "runtime/cuda/pinned_host.h"

#include <cuda_runtime.h>

#include <map>
#include <mutex>

#include "runtime/cuda/cuda_support.h"

namespace braid::runtime::cuda {

namespace {

struct Pinned {
  std::mutex mutex;
  std::map<void*, int> holders;  // by the range's first byte
};
Pinned& pinned() {
  static Pinned* p = new Pinned();  // never destroyed: devices may go during exit
  return *p;
}

}  // namespace

void pinHost(void* p, size_t bytes) {
  Pinned& all = pinned();
  std::lock_guard<std::mutex> lock(all.mutex);
  auto it = all.holders.find(p);
  if (it != all.holders.end()) {
    ++it->second;
    return;
  }
  check(cudaHostRegister(p, bytes, cudaHostRegisterPortable | cudaHostRegisterMapped),
        "cudaHostRegister (one-sided signal counters)");
  all.holders[p] = 1;
}

void unpinHost(void* p) {
  Pinned& all = pinned();
  std::lock_guard<std::mutex> lock(all.mutex);
  auto it = all.holders.find(p);
  if (it == all.holders.end() || --it->second > 0) return;
  all.holders.erase(it);
  cudaHostUnregister(p);
  cudaGetLastError();
}

}  // namespace braid::runtime::cuda
