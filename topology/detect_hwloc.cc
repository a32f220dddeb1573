// NUMA nodes and their CPUs from hwloc, opened with dlopen (headers only at build time).
#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>

#include "braid_config.h"
#include "core/log.h"
#include "topology/detect.h"

#if BRAID_HAVE_HWLOC_HEADERS
#include <hwloc.h>
#endif

namespace braid::topo {

std::string cpuMaskText(const std::vector<int>& cpus) {
  // NCCL's (and sysfs cpumap's) format: 32-bit words in hex, most significant first, commas.
  int last = -1;
  for (int c : cpus) last = std::max(last, c);
  int words = last / 32 + 1;
  std::vector<uint32_t> mask(static_cast<size_t>(words), 0);
  for (int c : cpus) mask[static_cast<size_t>(c / 32)] |= 1u << (c % 32);
  std::string out;
  char buf[16];
  for (int w = words - 1; w >= 0; --w) {
    snprintf(buf, sizeof buf, "%08x", mask[static_cast<size_t>(w)]);
    out += buf;
    if (w) out += ",";
  }
  return out;
}

#if BRAID_HAVE_HWLOC_HEADERS

std::vector<NumaNode> detectHwlocNumaNodes(const std::string& library) {
  std::vector<NumaNode> out;
  void* h = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    BRAID_INFO(log::kGraph, "hwloc not loaded (%s): NUMA nodes come from sysfs", dlerror());
    return out;
  }
  auto init = reinterpret_cast<int (*)(hwloc_topology_t*)>(dlsym(h, "hwloc_topology_init"));
  auto load = reinterpret_cast<int (*)(hwloc_topology_t)>(dlsym(h, "hwloc_topology_load"));
  auto destroy = reinterpret_cast<void (*)(hwloc_topology_t)>(dlsym(h, "hwloc_topology_destroy"));
  auto count = reinterpret_cast<unsigned (*)(hwloc_topology_t, int)>(dlsym(h, "hwloc_get_nbobjs_by_depth"));
  auto get = reinterpret_cast<hwloc_obj_t (*)(hwloc_topology_t, int, unsigned)>(dlsym(h, "hwloc_get_obj_by_depth"));
  auto isset = reinterpret_cast<int (*)(hwloc_const_bitmap_t, unsigned)>(dlsym(h, "hwloc_bitmap_isset"));
  auto last = reinterpret_cast<int (*)(hwloc_const_bitmap_t)>(dlsym(h, "hwloc_bitmap_last"));
  hwloc_topology_t topology = nullptr;
  if (!init || !load || !destroy || !count || !get || !isset || !last || init(&topology) != 0) {
    BRAID_WARN("%s lacks hwloc functions Braid needs (or failed to start); NUMA nodes come from sysfs", library.c_str());
    dlclose(h);
    return out;
  }
  if (load(topology) == 0) {
    unsigned n = count(topology, HWLOC_TYPE_DEPTH_NUMANODE);
    for (unsigned i = 0; i < n; ++i) {
      hwloc_obj_t node = get(topology, HWLOC_TYPE_DEPTH_NUMANODE, i);
      if (!node || !node->cpuset) continue;
      std::vector<int> cpus;
      int top = last(node->cpuset);
      for (int c = 0; c <= top && c < 65536; ++c)
        if (isset(node->cpuset, static_cast<unsigned>(c))) cpus.push_back(c);
      if (cpus.empty()) continue;  // memory-only nodes (CXL, HBM) carry no CPUs
      out.push_back({static_cast<int>(node->os_index), cpuMaskText(cpus)});
    }
  }
  destroy(topology);
  dlclose(h);
  return out;
}

#else

std::vector<NumaNode> detectHwlocNumaNodes(const std::string&) {
  BRAID_INFO(log::kGraph, "built without hwloc headers: NUMA nodes come from sysfs");
  return {};
}

#endif

}  // namespace braid::topo
