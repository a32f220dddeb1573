#include <cstdlib>

#include "perf/perf_device.h"

namespace braid::perf::device {

bool usable(const char** why) {
  *why = "built without CUDA";
  return false;
}
void select(int) {}
void* allocate(size_t) { std::abort(); }
void release(void*) {}
void toDevice(void*, const void*, size_t, void*) { std::abort(); }
void toHost(void*, const void*, size_t, void*) { std::abort(); }
void* newStream() { return nullptr; }
void deleteStream(void*) {}
void synchronize(void*) {}
const char* name() { return "none"; }
double copyBandwidth(size_t) { return 0; }

}  // namespace braid::perf::device
