// libFuzzer target: NCCL topology XML (NCCL_TOPO_FILE) through the reader, the graph builder,
// the paths and, for small systems, the channel search. Any input must give a system or a
// braid::Error; never a crash, a hang or unbounded memory.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/status.h"
#include "topology/detect.h"
#include "topology/search.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace braid::topo;
  try {
    XmlNode doc = parseXml(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.xml");
    assumeDevices(doc, DeviceAssumptions{size % 2 ? 80 : 0, size % 3 ? 100000.0 : 0.0});
    System system = buildSystem(doc, "fuzz.xml");
    if (system.nodes.size() <= 64) {
      Paths paths(system);
      if (system.count(NodeType::Gpu) <= 8) {
        SearchRequest request;
        request.nodes = 1 + static_cast<int>(size % 2);
        request.maxChannels = 4;
        searchGraph(paths, request);
      }
    }
  } catch (const braid::Error&) {
  }
  return 0;
}
