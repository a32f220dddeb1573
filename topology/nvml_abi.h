// The part of NVML's C interface Braid calls, declared from NVIDIA's published nvml.h facts
// (the toolkit's header is not needed to build). detect_nvml.cc opens the library with dlopen;
// the test double (test/doubles/fake_nvml.c) implements the same functions.
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

typedef int braidNvmlReturn;  // nvmlReturn_t: 0 success, 3 not supported, ...
typedef struct braidNvmlDeviceOpaque* braidNvmlDevice;  // nvmlDevice_t

enum { kBraidNvmlSuccess = 0, kBraidNvmlErrorInvalidArgument = 2, kBraidNvmlErrorNotSupported = 3 };
enum { kBraidNvmlMaxNvlinks = 18 };  // NVML_NVLINK_MAX_LINKS
enum { kBraidNvlinkDeviceGpu = 0, kBraidNvlinkDeviceIbmNpu = 1, kBraidNvlinkDeviceSwitch = 2 };

/// nvmlPciInfo_t (the _v3 query).
typedef struct {
  char busIdLegacy[16];
  unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
} braidNvmlPciInfo;

// Function types, named after the NVML symbols they are looked up as.
typedef braidNvmlReturn (*braidNvmlInit_v2)(void);
typedef braidNvmlReturn (*braidNvmlShutdown)(void);
typedef braidNvmlReturn (*braidNvmlDeviceGetCount_v2)(unsigned int*);
typedef braidNvmlReturn (*braidNvmlDeviceGetHandleByIndex_v2)(unsigned int, braidNvmlDevice*);
typedef braidNvmlReturn (*braidNvmlDeviceGetPciInfo_v3)(braidNvmlDevice, braidNvmlPciInfo*);
typedef braidNvmlReturn (*braidNvmlDeviceGetCudaComputeCapability)(braidNvmlDevice, int*, int*);
typedef braidNvmlReturn (*braidNvmlDeviceGetNvLinkState)(braidNvmlDevice, unsigned int, int*);
typedef braidNvmlReturn (*braidNvmlDeviceGetNvLinkRemotePciInfo_v2)(braidNvmlDevice, unsigned int, braidNvmlPciInfo*);
typedef braidNvmlReturn (*braidNvmlDeviceGetNvLinkRemoteDeviceType)(braidNvmlDevice, unsigned int, int*);

#ifdef __cplusplus
}
#endif
