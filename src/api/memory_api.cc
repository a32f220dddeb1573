// Memory allocation, buffer registration and symmetric windows.
#include <cstdlib>
#include <mutex>
#include <map>

#include "api/api.h"
#include "comm/communicator.h"
#include "comm/init.h"
#include "runtime/device.h"

using namespace braid;

namespace {

constexpr const char* kCudaWork = "the CUDA backend work";
constexpr size_t kPage = 4096;

/// What ncclMemAlloc handed out (true: device memory), so ncclMemFree can refuse anything else
/// and free each kind its own way.
struct HostAllocations {
  std::mutex mutex;
  std::map<void*, bool> live;
};
HostAllocations& allocations() {
  static HostAllocations* a = new HostAllocations();  // never destroyed: frees may come during exit
  return *a;
}

}  // namespace

BRAID_API(ncclResult_t, ncclMemAlloc, void** ptr, size_t size);
ncclResult_t pncclMemAlloc(void** ptr, size_t size) {
  return api::guarded("ncclMemAlloc", nullptr, [&] {
    api::requireNonNull(ptr, "ptr");
    if (size == 0) fail(ncclInvalidArgument, "size is 0");
    void* p = nullptr;
    // The CUDA backend where the library would choose it for a new rank on this thread: device
    // memory of the current device. Else page-aligned host memory, in whole pages.
    const bool onDevice = comm::deviceOfNewRank(comm::InitSettings::fromParams(), -1) >= 0;
    if (onDevice) {
      p = runtime::allocateDeviceMemory(size);
    } else {
      const size_t rounded = (size + kPage - 1) / kPage * kPage;
      if (rounded < size || posix_memalign(&p, kPage, rounded) != 0) {
        fail(ncclSystemError, "cannot allocate %zu bytes of host memory", size);
      }
    }
    std::lock_guard<std::mutex> lock(allocations().mutex);
    allocations().live[p] = onDevice;
    *ptr = p;
    return ncclSuccess;
  });
}

BRAID_API(ncclResult_t, ncclMemFree, void* ptr);
ncclResult_t pncclMemFree(void* ptr) {
  return api::guarded("ncclMemFree", nullptr, [&] {
    if (ptr == nullptr) return ncclSuccess;  // freeing NULL is a no-op
    bool onDevice = false;
    {
      std::lock_guard<std::mutex> lock(allocations().mutex);
      auto it = allocations().live.find(ptr);
      if (it == allocations().live.end()) fail(ncclInvalidArgument, "ptr %p was not allocated by ncclMemAlloc", ptr);
      onDevice = it->second;
      allocations().live.erase(it);
    }
    if (onDevice) {
      runtime::freeDeviceMemory(ptr);
    } else {
      std::free(ptr);
    }
    return ncclSuccess;
  });
}

BRAID_API(ncclResult_t, ncclCommRegister, const ncclComm_t comm, void* buff, size_t size, void** handle);
ncclResult_t pncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle) {
  return api::guarded("ncclCommRegister", comm, [&] {
    Communicator& c = communicatorFrom(comm);
    api::requireNonNull(handle, "handle");
    if (buff == nullptr && size > 0) fail(ncclInvalidArgument, "buff is NULL with size %zu", size);
    *handle = c.registrations().add(buff, size);
    return ncclSuccess;
  });
}

BRAID_API(ncclResult_t, ncclCommDeregister, const ncclComm_t comm, void* handle);
ncclResult_t pncclCommDeregister(const ncclComm_t comm, void* handle) {
  return api::guarded("ncclCommDeregister", comm, [&] {
    communicatorFrom(comm).registrations().remove(handle);
    return ncclSuccess;
  });
}

BRAID_API(ncclResult_t, ncclCommWindowRegister, ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
          int winFlags);
ncclResult_t pncclCommWindowRegister(ncclComm_t comm, void*, size_t, ncclWindow_t* win, int) {
  return api::guarded("ncclCommWindowRegister", comm, [&]() -> ncclResult_t {
    communicatorFrom(comm);
    api::requireNonNull(win, "win");
    api::notImplemented(kCudaWork);
  });
}

BRAID_API(ncclResult_t, ncclCommWindowDeregister, ncclComm_t comm, ncclWindow_t win);
ncclResult_t pncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t) {
  return api::guarded("ncclCommWindowDeregister", comm, [&]() -> ncclResult_t {
    communicatorFrom(comm);
    api::notImplemented(kCudaWork);
  });
}
