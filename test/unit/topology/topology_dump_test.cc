// NCCL_TOPO_DUMP_FILE writes the system that was searched: published files that list GPUs and
// NICs only as PCI functions, made GPUs and ports by braid-topo's --assume-gpu/--assume-nic,
// dump with those <gpu> and <nic> elements, and the dump read back (without the assumptions)
// gives the same system and the same channels.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "topology/topology.h"
#include "../core/test_env.h"

using namespace braid::topo;

namespace {

std::string data(const std::string& file) {
  const char* dir = std::getenv("BRAID_TOPO_DATA");
  if (dir == nullptr) FAIL("BRAID_TOPO_DATA is not set (run the tests through meson test)");
  return std::string(dir) + "/" + file;
}

/// Elements named `name` anywhere below `node`.
int countElements(const XmlNode& node, const std::string& name) {
  int n = 0;
  for (const XmlNode& c : node.children) n += (c.name == name) + countElements(c, name);
  return n;
}

/// The file alone (no detection), with the given assumptions, for `nodes` machines.
std::unique_ptr<Topology> loadFile(const std::string& file, DeviceAssumptions assume, int nodes,
                                   const std::string& dump = "") {
  TopologyRequest r;
  r.topoFile = file;
  r.detect = false;
  r.assume = assume;
  r.nodes = nodes;
  r.topoDumpFile = dump;
  return loadTopology(r);
}

}  // namespace

TEST_CASE("The topology dump holds the GPUs and NICs assumed for a PCI-only file and reads back to the same channels",
          "[topology][dump]") {
  struct Case {
    const char* file;
    DeviceAssumptions assume;
    int gpus, nics;
  };
  // OCI BM.GPU4.8 and AWS p4d: PCI switches, GPUs (class 0x0302) and NICs (0x0200) as bare
  // PCI functions, no <gpu> or <nic> elements.
  for (const Case& c : {Case{"oci-topo-flattened.xml", {90, 200000}, 8, 8}, Case{"aws-p4d-24xl-topo.xml", {80, 100000}, 8, 4}}) {
    for (int nodes : {1, 2}) {
      CAPTURE(c.file, nodes);
      REQUIRE(countElements(readXmlFile(data(c.file)), "gpu") == 0);
      braid::test::TempDir dir;
      const std::string dump = dir.file("dump.xml");
      const auto used = loadFile(data(c.file), c.assume, nodes, dump);
      REQUIRE(used->system.count(NodeType::Gpu) == c.gpus);
      REQUIRE(used->system.count(NodeType::Net) == c.nics);
      REQUIRE(!used->ring.channels.empty());
      const XmlNode written = readXmlFile(dump);
      CHECK(countElements(written, "gpu") == c.gpus);
      CHECK(countElements(written, "nic") == c.nics);
      CHECK(countElements(written, "net") == c.nics);
      // Read back as a file like any other: no assumptions needed, nothing left out.
      const auto again = loadFile(dump, {}, nodes);
      CHECK(again->system.notes.empty());
      CHECK(again->system.describe() == used->system.describe());
      CHECK(describeGraph(again->ring) == describeGraph(used->ring));
      CHECK(describeGraph(again->tree) == describeGraph(used->tree));
      if (nodes > 1) {
        for (const Channel& ch : again->ring.channels) CHECK(ch.netIn >= 0);
      }
    }
  }
}

TEST_CASE("assumeDevices numbers assumed devices among the described ones and leaves those alone", "[topology][dump]") {
  XmlNode doc = parseXml(
      "<system version=\"1\"><cpu numaid=\"0\">"
      "<pci busid=\"0000:01:00.0\" class=\"0x030200\"><gpu dev=\"0\" sm=\"80\" rank=\"0\" gdr=\"0\"/></pci>"
      "<nic><net name=\"virt0\" dev=\"0\" speed=\"10000\"/></nic>"
      "<pci busid=\"0000:02:00.0\" class=\"0x060400\">"
      "<pci busid=\"03:00.0\" class=\"0x030200\"/><pci busid=\"0000:04:00.0\" class=\"0x020000\"/></pci>"
      "<pci busid=\"0000:05:00.0\" class=\"0x010802\"/>"
      "</cpu></system>",
      "mixed.xml");
  assumeDevices(doc, DeviceAssumptions{90, 400000});
  const std::string once = writeXml(doc.children.at(0));
  CHECK_THAT(once, Catch::Contains("<gpu dev=\"0\" sm=\"80\" rank=\"0\" gdr=\"0\"/>"));  // as described
  CHECK_THAT(once, Catch::Contains("<gpu dev=\"1\" sm=\"90\" rank=\"1\" gdr=\"1\"/>"));
  CHECK_THAT(once, Catch::Contains("<net name=\"nic-0000:04:00.0\" dev=\"1\" speed=\"400000\" port=\"1\""));
  CHECK(countElements(doc, "gpu") == 2);
  CHECK(countElements(doc, "nic") == 2);  // the storage device (0x0108) is not a NIC
  assumeDevices(doc, DeviceAssumptions{90, 400000});
  CHECK(writeXml(doc.children.at(0)) == once);  // the devices it wrote are described now
  const System s = buildSystem(doc, "mixed.xml");
  CHECK(s.count(NodeType::Gpu) == 2);
  CHECK(s.count(NodeType::Net) == 2);
  CHECK(s.notes.empty());
}

TEST_CASE("braid-topo's NCCL_TOPO_DUMP_FILE with --assume-gpu/--assume-nic reads back to the same rings",
          "[topology][dump][tools]") {
  const char* exe = std::getenv("BRAID_TOPO_EXE");
  REQUIRE(exe != nullptr);
  braid::test::TempDir dir;
  const std::string dump = dir.file("oci-used.xml");
  const std::string oci = data("oci-topo-flattened.xml");
  const std::string used = braid::test::runShell("NCCL_TOPO_DUMP_FILE=" + dump + " " + exe + " --no-detect --topo-file " +
                                                 oci + " --assume-gpu sm90 --assume-nic 200G --nodes 2");
  CHECK_THAT(used, Catch::Contains("(8 GPUs, 8 network ports, 4 NUMA nodes)") && Catch::EndsWith("exit=0\n"));
  const XmlNode written = readXmlFile(dump);
  CHECK(countElements(written, "gpu") == 8);
  CHECK(countElements(written, "nic") == 8);
  const std::string again = braid::test::runShell(std::string(exe) + " --no-detect --topo-file " + dump + " --nodes 2");
  CHECK_THAT(again, Catch::Contains("(8 GPUs, 8 network ports, 4 NUMA nodes)") && Catch::EndsWith("exit=0\n"));
  CHECK_THAT(again, !Catch::Contains("note:"));
  auto rings = [](const std::string& out) {
    const size_t at = out.find("Rings (across machines):");
    return at == std::string::npos ? std::string("(no rings)") : out.substr(at);
  };
  CHECK(rings(again) == rings(used));
  CHECK_THAT(rings(used), Catch::Contains(" 0 : NET/"));
}
