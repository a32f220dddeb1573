// The GPU Direct RDMA decision the verbs transport and net plugins share
// (transport/net/gpu_direct.h): the host backend never, the GPU-NIC path against
// NCCL_NET_GDR_LEVEL (a NIC sysfs does not place only at SYS), NCCL_NET_GDR_READ for senders,
// and for receivers the flush: needed on GPUs that do not order the NIC's writes, when the NIC
// or NCCL_NET_FORCE_FLUSH asks, refused where the transport cannot flush.
#include "transport/net/gpu_direct.h"

#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>

#include "topology/pci_path.h"

using namespace braid;
using namespace braid::transport;

namespace {

/// An allocator that only answers the two questions the decision asks.
class GpuFacts final : public FifoAllocator {
 public:
  GpuFacts(bool orders, bool reads) : orders_(orders), reads_(reads) {}
  void* allocateControl(size_t) override { return nullptr; }
  void freeControl(void*) override {}
  void* allocateData(size_t, bool) override { return nullptr; }
  void freeData(void*) override {}
  void registerHost(void*, size_t) override {}
  void unregisterHost(void*) override {}
  bool ordersRemoteWrites() override { return orders_; }
  bool nicReadsWell() override { return reads_; }

 private:
  bool orders_, reads_;
};

/// A sysfs with a GPU (0000:01:00.0) and a NIC (0000:01:00.1) below one bridge, and a NIC
/// (0000:81:00.0) under another root complex on another NUMA node.
struct FakeSysfs {
  std::string root;
  FakeSysfs() {
    char dir[] = "/tmp/braid-gdr-XXXXXX";
    root = mkdtemp(dir);
    const std::string devices = root + "/sys/devices";
    const std::string a = devices + "/pci0000:00/0000:00:01.0";
    const std::string b = devices + "/pci0000:80/0000:80:01.0";
    for (const std::string& d : {a + "/0000:01:00.0", a + "/0000:01:00.1", b + "/0000:81:00.0"}) makeDirs(d);
    makeDirs(root + "/sys/bus/pci/devices");
    REQUIRE(symlink((a + "/0000:01:00.0").c_str(), (root + "/sys/bus/pci/devices/0000:01:00.0").c_str()) ==
            0);
    REQUIRE(symlink((b + "/0000:81:00.0").c_str(), (root + "/sys/bus/pci/devices/0000:81:00.0").c_str()) ==
            0);
    write(a + "/0000:01:00.0/numa_node", "0");
    write(b + "/0000:81:00.0/numa_node", "1");
  }
  ~FakeSysfs() { std::system(("rm -rf " + root).c_str()); }
  static void makeDirs(const std::string& path) {
    for (size_t at = 1; at != std::string::npos; at = path.find('/', at + 1))
      mkdir(path.substr(0, at).c_str(), 0755);
    mkdir(path.c_str(), 0755);
  }
  static void write(const std::string& path, const char* text) {
    FILE* f = std::fopen(path.c_str(), "w");
    REQUIRE(f != nullptr);
    std::fputs(text, f);
    std::fclose(f);
  }
};

}  // namespace

TEST_CASE("GPU Direct RDMA: the GPU-NIC path, NCCL_NET_GDR_READ and the flush decide", "[transport][gdr]") {
  FakeSysfs sysfs;
  GpuFacts hopper(true, true), ampere(false, true), volta(false, false);
  GpuDirectPolicy p;
  p.allocator = &hopper;
  p.gpuBusId = 1 << 8;  // 0000:01:00.0 (bus 1)
  p.sysRoot = sysfs.root;
  REQUIRE(topo::busIdText(p.gpuBusId) == "0000:01:00.0");
  const auto nearNic =
      topo::sysfsDeviceChain("/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.1", sysfs.root);
  const auto farNic = topo::sysfsDeviceChain("/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0", sysfs.root);
  REQUIRE(nearNic.size() == 3);
  REQUIRE(farNic.size() == 3);

  // Near (PIX): both ends; a Hopper receiver needs no flush.
  GpuDirectChoice c = chooseGpuDirect(p, nearNic, true, false, false);
  CHECK((c.slotsOnGpu && !c.needsFlush && c.why.empty()));
  CHECK(chooseGpuDirect(p, nearNic, false, false, false).slotsOnGpu);
  // Far (SYS) is beyond PXB; SYS lets it; an unknown NIC only at SYS.
  c = chooseGpuDirect(p, farNic, false, false, true);
  CHECK(!c.slotsOnGpu);
  CHECK(c.why == "the GPU-NIC path is SYS, beyond NCCL_NET_GDR_LEVEL=PXB");
  CHECK(!chooseGpuDirect(p, {}, false, false, true).slotsOnGpu);
  p.level = topo::PathType::Sys;
  CHECK(chooseGpuDirect(p, farNic, false, false, true).slotsOnGpu);
  CHECK(chooseGpuDirect(p, {}, false, false, true).slotsOnGpu);
  p.level = topo::PathType::Pxb;

  // The flush: asked for by the NIC or NCCL_NET_FORCE_FLUSH, needed before Hopper; refused
  // (host memory) where the transport cannot flush.
  c = chooseGpuDirect(p, nearNic, true, true, true);
  CHECK((c.slotsOnGpu && c.needsFlush));
  c = chooseGpuDirect(p, nearNic, true, true, false);
  CHECK((!c.slotsOnGpu && !c.needsFlush && c.why == "the NIC asks for a flush this transport cannot make"));
  p.forceFlush = true;
  CHECK(chooseGpuDirect(p, nearNic, true, false, true).needsFlush);
  CHECK(chooseGpuDirect(p, nearNic, true, false, false).why ==
        "NCCL_NET_FORCE_FLUSH=1 asks for a flush this transport cannot make");
  CHECK(!chooseGpuDirect(p, nearNic, false, false, false).needsFlush);  // (senders never flush)
  p.forceFlush = false;
  p.allocator = &ampere;
  c = chooseGpuDirect(p, nearNic, true, false, true);
  CHECK((c.slotsOnGpu && c.needsFlush));
  CHECK(!chooseGpuDirect(p, nearNic, true, false, false).slotsOnGpu);

  // NCCL_NET_GDR_READ: senders by default from Ampere on; 0 never, 1 always.
  CHECK(chooseGpuDirect(p, nearNic, false, false, false).slotsOnGpu);
  p.allocator = &volta;
  c = chooseGpuDirect(p, nearNic, false, false, false);
  CHECK((!c.slotsOnGpu && c.why.find("NCCL_NET_GDR_READ=1 insists") != std::string::npos));
  p.read = 1;
  CHECK(chooseGpuDirect(p, nearNic, false, false, false).slotsOnGpu);
  p.read = 0;
  p.allocator = &hopper;
  CHECK(chooseGpuDirect(p, nearNic, false, false, false).why == "NCCL_NET_GDR_READ=0");

  // The host backend: never, and nothing to say.
  p.allocator = nullptr;
  c = chooseGpuDirect(p, nearNic, true, false, true);
  CHECK((!c.slotsOnGpu && c.why.empty()));
}
