// Memory allocation, buffer registration and symmetric windows.
#include "api/api.h"
#include "comm/communicator.h"

using namespace braid;

namespace {
constexpr const char* kCudaWork = "the CUDA backend work";
}

BRAID_API(ncclResult_t, ncclMemAlloc, void** ptr, size_t size);
ncclResult_t pncclMemAlloc(void** ptr, size_t) {
  return api::guarded("ncclMemAlloc", nullptr, [&]() -> ncclResult_t {
    api::requireNonNull(ptr, "ptr");
    api::notImplemented(kCudaWork);
  });
}

BRAID_API(ncclResult_t, ncclMemFree, void* ptr);
ncclResult_t pncclMemFree(void* ptr) {
  return api::guarded("ncclMemFree", nullptr, [&]() -> ncclResult_t {
    if (ptr == nullptr) return ncclSuccess;  // freeing NULL is a no-op
    api::notImplemented(kCudaWork);
  });
}

BRAID_API(ncclResult_t, ncclCommRegister, const ncclComm_t comm, void* buff, size_t size, void** handle);
ncclResult_t pncclCommRegister(const ncclComm_t comm, void*, size_t, void** handle) {
  return api::guarded("ncclCommRegister", comm, [&]() -> ncclResult_t {
    communicatorFrom(comm);
    api::requireNonNull(handle, "handle");
    api::notImplemented(kCudaWork);
  });
}

BRAID_API(ncclResult_t, ncclCommDeregister, const ncclComm_t comm, void* handle);
ncclResult_t pncclCommDeregister(const ncclComm_t comm, void*) {
  return api::guarded("ncclCommDeregister", comm, [&]() -> ncclResult_t {
    communicatorFrom(comm);
    api::notImplemented(kCudaWork);
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
