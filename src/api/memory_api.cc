// Memory allocation, buffer registration and symmetric windows.
#include <cstdlib>
#include <mutex>
#include <set>

#include "api/api.h"
#include "comm/communicator.h"

using namespace braid;

namespace {

constexpr const char* kCudaWork = "the CUDA backend work";
constexpr size_t kPage = 4096;

/// What ncclMemAlloc handed out (host backend), so ncclMemFree can refuse anything else.
struct HostAllocations {
  std::mutex mutex;
  std::set<void*> live;
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
    // Host backend: page-aligned host memory, rounded up to whole pages.
    void* p = nullptr;
    const size_t rounded = (size + kPage - 1) / kPage * kPage;
    if (rounded < size || posix_memalign(&p, kPage, rounded) != 0) {
      fail(ncclSystemError, "cannot allocate %zu bytes of host memory", size);
    }
    std::lock_guard<std::mutex> lock(allocations().mutex);
    allocations().live.insert(p);
    *ptr = p;
    return ncclSuccess;
  });
}

BRAID_API(ncclResult_t, ncclMemFree, void* ptr);
ncclResult_t pncclMemFree(void* ptr) {
  return api::guarded("ncclMemFree", nullptr, [&] {
    if (ptr == nullptr) return ncclSuccess;  // freeing NULL is a no-op
    {
      std::lock_guard<std::mutex> lock(allocations().mutex);
      if (allocations().live.erase(ptr) == 0) fail(ncclInvalidArgument, "ptr %p was not allocated by ncclMemAlloc", ptr);
    }
    std::free(ptr);
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
