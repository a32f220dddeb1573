/* A test double for NVML, loaded by Braid's detection through BRAID_NVML_LIBRARY.
 *
 * It answers the calls Braid makes for a fixed machine:
 *   GPU 0 0000:1a:00.0 sm90   GPU 1 0000:1b:00.0 sm90
 *   GPU 2 0000:3a:00.0 sm90   GPU 3 0000:3b:00.0 sm90
 *   NVLinks: GPU0<->GPU1 and GPU2<->GPU3 with 4 links each (links 0-3), and every GPU with
 *   2 links (4-5) to an NVSwitch at 0000:c0:00.0; links 6-17 are down.
 * None of these bus ids exist in this machine's sysfs, so Braid places them under CPU 0. */
#include <stdio.h>
#include <string.h>

#include "topology/nvml_abi.h"

static const char* const kBus[4] = {"00000000:1A:00.0", "00000000:1B:00.0", "00000000:3A:00.0", "00000000:3B:00.0"};
static int initialized;
static int tokens[4]; /* a handle is the address of one of these */

static int index_of(braidNvmlDevice d) { return (int)((int*)(void*)d - tokens); }

braidNvmlReturn nvmlInit_v2(void) { initialized = 1; return kBraidNvmlSuccess; }
braidNvmlReturn nvmlShutdown(void) { initialized = 0; return kBraidNvmlSuccess; }

braidNvmlReturn nvmlDeviceGetCount_v2(unsigned int* n) {
  if (!initialized) return 1; /* NVML_ERROR_UNINITIALIZED */
  *n = 4;
  return kBraidNvmlSuccess;
}

braidNvmlReturn nvmlDeviceGetHandleByIndex_v2(unsigned int i, braidNvmlDevice* d) {
  if (i >= 4) return kBraidNvmlErrorInvalidArgument;
  *d = (braidNvmlDevice)(void*)&tokens[i];
  return kBraidNvmlSuccess;
}

static void fill(braidNvmlPciInfo* info, const char* bus) {
  memset(info, 0, sizeof *info);
  snprintf(info->busId, sizeof info->busId, "%s", bus);
}

braidNvmlReturn nvmlDeviceGetPciInfo_v3(braidNvmlDevice d, braidNvmlPciInfo* info) {
  int i = index_of(d);
  if (i < 0 || i >= 4) return kBraidNvmlErrorInvalidArgument;
  fill(info, kBus[i]);
  return kBraidNvmlSuccess;
}

braidNvmlReturn nvmlDeviceGetCudaComputeCapability(braidNvmlDevice d, int* major, int* minor) {
  (void)d;
  *major = 9;
  *minor = 0;
  return kBraidNvmlSuccess;
}

braidNvmlReturn nvmlDeviceGetNvLinkState(braidNvmlDevice d, unsigned int link, int* active) {
  (void)d;
  if (link >= kBraidNvmlMaxNvlinks) return kBraidNvmlErrorInvalidArgument;
  *active = link < 6;
  return kBraidNvmlSuccess;
}

braidNvmlReturn nvmlDeviceGetNvLinkRemotePciInfo_v2(braidNvmlDevice d, unsigned int link, braidNvmlPciInfo* info) {
  int i = index_of(d);
  if (link >= 6) return kBraidNvmlErrorNotSupported;
  fill(info, link < 4 ? kBus[i ^ 1] : "00000000:C0:00.0");
  return kBraidNvmlSuccess;
}

braidNvmlReturn nvmlDeviceGetNvLinkRemoteDeviceType(braidNvmlDevice d, unsigned int link, int* type) {
  (void)d;
  if (link >= 6) return kBraidNvmlErrorNotSupported;
  *type = link < 4 ? kBraidNvlinkDeviceGpu : kBraidNvlinkDeviceSwitch;
  return kBraidNvmlSuccess;
}
