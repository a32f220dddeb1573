// GPUs and NVLinks from NVML, opened with dlopen.
#include <dlfcn.h>

#include <cctype>
#include <map>

#include "core/log.h"
#include "topology/detect.h"
#include "topology/nvml_abi.h"

namespace braid::topo {

namespace {

std::string normalizeBusId(const char* text) {
  // NVML writes "00000000:1A:00.0" (8-digit domain); NCCL's files use "0000:1a:00.0".
  std::string s(text);
  for (char& c : s) c = static_cast<char>(tolower(static_cast<unsigned char>(c)));
  size_t colon = s.find(':');
  if (colon != std::string::npos && colon > 4) s = s.substr(colon - 4);
  return s;
}

class Nvml {
 public:
  explicit Nvml(const std::string& library) {
    handle_ = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle_) {
      BRAID_INFO(log::kGraph, "NVML not loaded (%s): no GPUs detected through it", dlerror());
      return;
    }
    bool ok = sym(init_, "nvmlInit_v2") && sym(shutdown_, "nvmlShutdown") && sym(count_, "nvmlDeviceGetCount_v2") &&
              sym(byIndex_, "nvmlDeviceGetHandleByIndex_v2") && sym(pci_, "nvmlDeviceGetPciInfo_v3") &&
              sym(cc_, "nvmlDeviceGetCudaComputeCapability");
    sym(linkState_, "nvmlDeviceGetNvLinkState");
    sym(remotePci_, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
    sym(remoteType_, "nvmlDeviceGetNvLinkRemoteDeviceType");
    if (!ok) {
      BRAID_WARN("%s lacks NVML functions Braid needs; GPUs are not detected through it", library.c_str());
      return;
    }
    int rc = init_();
    if (rc != kBraidNvmlSuccess) {
      BRAID_INFO(log::kGraph, "nvmlInit failed (%d): no GPUs detected through NVML", rc);
      return;
    }
    ready_ = true;
  }
  ~Nvml() {
    if (ready_) shutdown_();
    if (handle_) dlclose(handle_);
  }

  std::vector<DetectedDevice> gpus() {
    std::vector<DetectedDevice> out;
    unsigned n = 0;
    if (!ready_ || count_(&n) != kBraidNvmlSuccess) return out;
    for (unsigned i = 0; i < n && i < 64; ++i) {
      braidNvmlDevice dev = nullptr;
      braidNvmlPciInfo info{};
      int major = 0, minor = 0;
      if (byIndex_(i, &dev) != kBraidNvmlSuccess || pci_(dev, &info) != kBraidNvmlSuccess ||
          cc_(dev, &major, &minor) != kBraidNvmlSuccess)
        continue;
      info.busId[sizeof info.busId - 1] = '\0';
      DetectedDevice d;
      d.busId = normalizeBusId(info.busId);
      d.pciClass = "0x030200";
      d.element.name = "gpu";
      d.element.set("dev", std::to_string(i));
      d.element.set("sm", std::to_string(major * 10 + minor));
      d.element.set("rank", std::to_string(i));
      d.element.set("gdr", "1");
      addNvlinks(dev, d.element);
      out.push_back(std::move(d));
    }
    return out;
  }

 private:
  template <typename F>
  bool sym(F& into, const char* name) {
    into = reinterpret_cast<F>(dlsym(handle_, name));
    return into != nullptr;
  }

  void addNvlinks(braidNvmlDevice dev, XmlNode& gpu) {
    if (!linkState_ || !remotePci_) return;
    std::map<std::string, std::pair<int, std::string>> peers;  // bus id -> count, class
    for (unsigned link = 0; link < kBraidNvmlMaxNvlinks; ++link) {
      int active = 0;
      braidNvmlPciInfo remote{};
      if (linkState_(dev, link, &active) != kBraidNvmlSuccess || !active) continue;
      if (remotePci_(dev, link, &remote) != kBraidNvmlSuccess) continue;
      remote.busId[sizeof remote.busId - 1] = '\0';
      int type = kBraidNvlinkDeviceGpu;
      if (remoteType_ && remoteType_(dev, link, &type) != kBraidNvmlSuccess) type = kBraidNvlinkDeviceGpu;
      const char* tclass = type == kBraidNvlinkDeviceSwitch ? "0x068000"
                           : type == kBraidNvlinkDeviceIbmNpu ? "0x068001"
                                                              : "0x030200";
      auto& entry = peers[normalizeBusId(remote.busId)];
      entry.first++;
      entry.second = tclass;
    }
    for (const auto& [bus, entry] : peers) {
      XmlNode& nv = gpu.add("nvlink");
      nv.set("target", bus);
      nv.set("count", std::to_string(entry.first));
      nv.set("tclass", entry.second);
    }
  }

  void* handle_ = nullptr;
  bool ready_ = false;
  braidNvmlInit_v2 init_ = nullptr;
  braidNvmlShutdown shutdown_ = nullptr;
  braidNvmlDeviceGetCount_v2 count_ = nullptr;
  braidNvmlDeviceGetHandleByIndex_v2 byIndex_ = nullptr;
  braidNvmlDeviceGetPciInfo_v3 pci_ = nullptr;
  braidNvmlDeviceGetCudaComputeCapability cc_ = nullptr;
  braidNvmlDeviceGetNvLinkState linkState_ = nullptr;
  braidNvmlDeviceGetNvLinkRemotePciInfo_v2 remotePci_ = nullptr;
  braidNvmlDeviceGetNvLinkRemoteDeviceType remoteType_ = nullptr;
};

}  // namespace

std::vector<DetectedDevice> detectNvmlGpus(const std::string& library) {
  return Nvml(library).gpus();
}

}  // namespace braid::topo
