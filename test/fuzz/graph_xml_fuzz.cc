// libFuzzer target: graph files (NCCL_GRAPH_FILE) read against a fixed 4-GPU, 2-NIC system.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/status.h"
#include "topology/search.h"

namespace {
const char* const kSystem =
    "<system version=\"1\"><cpu numaid=\"0\" arch=\"x86_64\" vendor=\"GenuineIntel\" modelid=\"143\">"
    "<pci busid=\"0000:10:00.0\" class=\"0x060400\" link_speed=\"32.0 GT/s PCIe\" link_width=\"16\">"
    "<pci busid=\"0000:11:00.0\" class=\"0x030200\"><gpu dev=\"0\" sm=\"90\" rank=\"0\" gdr=\"1\">"
    "<nvlink target=\"0000:12:00.0\" count=\"4\" tclass=\"0x030200\"/></gpu></pci>"
    "<pci busid=\"0000:12:00.0\" class=\"0x030200\"><gpu dev=\"1\" sm=\"90\" rank=\"1\" gdr=\"1\"/></pci>"
    "<pci busid=\"0000:13:00.0\" class=\"0x020000\"><nic><net name=\"mlx5_0\" dev=\"0\" speed=\"200000\"/></nic></pci>"
    "</pci><pci busid=\"0000:20:00.0\" class=\"0x060400\">"
    "<pci busid=\"0000:21:00.0\" class=\"0x030200\"><gpu dev=\"2\" sm=\"90\" rank=\"2\" gdr=\"1\"/></pci>"
    "<pci busid=\"0000:22:00.0\" class=\"0x030200\"><gpu dev=\"3\" sm=\"90\" rank=\"3\" gdr=\"1\"/></pci>"
    "<pci busid=\"0000:23:00.0\" class=\"0x020000\"><nic><net name=\"mlx5_1\" dev=\"1\" speed=\"200000\"/></nic></pci>"
    "</pci></cpu></system>";
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace braid::topo;
  static const System system = buildSystem(parseXml(kSystem, "system"), "system");
  try {
    XmlNode doc = parseXml(std::string_view(reinterpret_cast<const char*>(data), size), "graph.xml");
    for (const Graph& g : graphsFromXml(doc, "graph.xml", system)) describeGraph(g);
  } catch (const braid::Error&) {
  }
  return 0;
}
