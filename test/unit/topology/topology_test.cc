// Topology: NCCL XML files of real machines, paths, decisions, the channel search, graph
// files, detection (this machine, and NVML/verbs doubles) and braid-topo.
#include <unistd.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <iterator>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "core/interfaces.h"
#include "core/status.h"
#include "topology/pci_path.h"
#include "topology/topology.h"
#include "../core/test_env.h"

using namespace braid::topo;

namespace {

std::string env(const char* variable) {
  const char* v = std::getenv(variable);
  if (v == nullptr) FAIL(variable << " is not set (run the tests through meson test)");
  return v;
}

std::string data(const std::string& file) { return env("BRAID_TOPO_DATA") + "/" + file; }

System load(const std::string& file, int assumeSm = 0, double assumeMbps = 0) {
  XmlNode doc = readXmlFile(data(file));
  assumeDevices(doc, DeviceAssumptions{assumeSm, assumeMbps});
  return buildSystem(doc, file);
}

int gpu(const System& s, int dev) {
  for (int n : s.of(NodeType::Gpu))
    if (s.nodes[n].dev == dev) return n;
  FAIL("no GPU dev " << dev);
  return -1;
}

int net(const System& s, int dev) {
  int n = s.netOfDev(dev);
  REQUIRE(n >= 0);
  return n;
}

std::string run(const std::string& command) { return braid::test::runShell(command); }

/// Every GPU exactly once in every channel.
void checkVisitsAll(const System& s, const Graph& g) {
  REQUIRE(!g.channels.empty());
  for (const Channel& c : g.channels) {
    std::set<int> seen(c.gpus.begin(), c.gpus.end());
    CHECK(seen.size() == c.gpus.size());
    CHECK(static_cast<int>(c.gpus.size()) == s.count(NodeType::Gpu));
  }
}

/// Positions of a and b are neighbours on the ring (cyclically).
bool adjacent(const Channel& c, int a, int b) {
  auto ia = std::find(c.gpus.begin(), c.gpus.end(), a) - c.gpus.begin();
  auto ib = std::find(c.gpus.begin(), c.gpus.end(), b) - c.gpus.begin();
  long n = static_cast<long>(c.gpus.size());
  return (ia + 1) % n == ib || (ib + 1) % n == ia;
}

std::string errorOf(const std::string& xml) {
  try {
    buildSystem(parseXml(xml, "t.xml"), "t.xml");
  } catch (const braid::Error& e) {
    CHECK(e.code() == ncclInvalidUsage);
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("PCIe, NVLink, NIC and CPU bandwidths follow NCCL's figures", "[topology]") {
  CHECK(pciBandwidth("8 GT/s", 16) == Approx(12));
  CHECK(pciBandwidth("16.0 GT/s PCIe", 16) == Approx(24));
  CHECK(pciBandwidth("32.0 GT/s PCIe", 16) == Approx(48));
  CHECK(pciBandwidth("16 GT/s", 8) == Approx(12));
  CHECK(pciBandwidth("32.0 GT/s PCIe", 0) == Approx(48));  // width unknown: x16
  CHECK(pciBandwidth("Unknown", 16) == Approx(12));        // speed unknown: Gen3
  CHECK(nvlinkBandwidth(90) * 18 == Approx(370.8));
  CHECK(nvlinkBandwidth(80) == Approx(20));
  CHECK(nvlinkBandwidth(100) == Approx(40.1));
  CHECK(interCpuBandwidth("x86_64", "GenuineIntel", 85) == Approx(10));
  CHECK(interCpuBandwidth("x86_64", "GenuineIntel", 143) == Approx(22));
  CHECK(interCpuBandwidth("x86_64", "AuthenticAMD", 49) == Approx(16));
  CHECK(interCpuBandwidth("arm64", "", 0) == Approx(6));
}

TEST_CASE("IBM Cloud 8xH100: NVSwitch, 8 NICs, one per GPU switch", "[topology]") {
  System s = load("ibm-cloud-gx3d-160x1792x8h100-topo.xml");
  CHECK(s.count(NodeType::Gpu) == 8);
  CHECK(s.count(NodeType::Net) == 8);
  CHECK(s.count(NodeType::Cpu) == 2);
  CHECK(s.count(NodeType::Nvs) == 1);
  CHECK(s.notes.empty());
  Paths p(s);
  for (int a = 0; a < 8; ++a)
    for (int b = 0; b < 8; ++b)
      if (a != b) {
        CHECK(p.at(gpu(s, a), gpu(s, b)).type == PathType::Nvl);
        CHECK(p.at(gpu(s, a), gpu(s, b)).bw == Approx(370.8));
      }
  // GPU k shares its PCI switch with mlx5_(7-k), net dev 7-k; 200 Gb/s = 25 GB/s.
  for (int k = 0; k < 8; ++k) {
    INFO("GPU " << k);
    CHECK(nearestNet(p, gpu(s, k)) == net(s, 7 - k));
    CHECK(p.at(gpu(s, k), net(s, 7 - k)).type == PathType::Pix);
    CHECK(p.at(gpu(s, k), net(s, 7 - k)).bw == Approx(25));
    CHECK(p.at(gpu(s, k), net(s, k == 0 ? 0 : 7)).type == PathType::Pxn);  // a far NIC, through an NVLink peer
  }
  SearchRequest ring;
  Graph g = searchGraph(p, ring);
  checkVisitsAll(s, g);
  CHECK(g.typeIntra == PathType::Nvl);
  CHECK(g.bwIntra >= 40);
  CHECK(g.bwIntra * g.channels.size() <= 370.8 + 1e-6);  // never more than the NVLinks carry
  CHECK(g.bwIntra * g.channels.size() >= 300);
  ring.nodes = 2;
  Graph inter = searchGraph(p, ring);
  checkVisitsAll(s, inter);
  // NCCL_CROSS_NIC=2 (the default): nearest ports first, so every channel enters beside its
  // first GPU and leaves beside its last (PIX both), crossing NICs.
  CHECK(inter.typeInter == PathType::Pix);
  CHECK(inter.crossNic == 1);
  for (const Channel& c : inter.channels) {
    CHECK(c.netIn == 7 - c.gpus.front());
    CHECK(c.netOut == 7 - c.gpus.back());
  }
  // NCCL_CROSS_NIC=0: one port per channel, in and out, all ports used.
  ring.policy.crossNic = 0;
  Graph same = searchGraph(p, ring);
  checkVisitsAll(s, same);
  std::set<int> nics;
  for (const Channel& c : same.channels) {
    CHECK(c.netIn >= 0);
    CHECK(c.netOut == c.netIn);
    nics.insert(c.netIn);
  }
  CHECK(nics.size() == 8);  // one NIC per channel, all NICs used
  CHECK(same.bwInter <= 25);
}

TEST_CASE("AWS p4d: PCI-only file, GPUs and EFA NICs assumed", "[topology]") {
  System bare = load("aws-p4d-24xl-topo.xml");
  CHECK(bare.count(NodeType::Gpu) == 0);
  CHECK(bare.notes.size() == 2);  // GPUs and NICs left out, with the flag that takes them
  System s = load("aws-p4d-24xl-topo.xml", 80, 100000);
  CHECK(s.count(NodeType::Gpu) == 8);
  CHECK(s.count(NodeType::Net) == 4);
  CHECK(s.count(NodeType::Cpu) == 2);
  Paths p(s);
  CHECK(p.at(gpu(s, 0), gpu(s, 1)).type == PathType::Pix);
  CHECK(p.at(gpu(s, 0), gpu(s, 1)).bw == Approx(12));  // 8 GT/s x16
  CHECK(p.at(gpu(s, 0), gpu(s, 2)).type == PathType::Phb);
  CHECK(p.at(gpu(s, 0), gpu(s, 4)).type == PathType::Sys);
  CHECK(p.at(gpu(s, 0), gpu(s, 4)).bw == Approx(10));  // Skylake UPI
  for (int k = 0; k < 8; ++k) CHECK(nearestNet(p, gpu(s, k)) == net(s, k / 2));
  Graph g = searchGraph(p, SearchRequest{});
  checkVisitsAll(s, g);
  for (const Channel& c : g.channels)
    for (int pair = 0; pair < 4; ++pair) CHECK(adjacent(c, 2 * pair, 2 * pair + 1));
  PathPolicy pix;
  pix.p2pLevel = PathType::Pix;
  CHECK(useP2p(p, pix, gpu(s, 0), gpu(s, 1)));
  CHECK_FALSE(useP2p(p, pix, gpu(s, 0), gpu(s, 2)));
  PathPolicy def;
  CHECK(useGdr(p, def, gpu(s, 0), net(s, 0)));
  CHECK_FALSE(useGdr(p, def, gpu(s, 0), net(s, 1)));  // PHB is beyond the default PXB
  PathPolicy off;
  off.p2pLevel = PathType::Loc;
  CHECK_FALSE(useP2p(p, off, gpu(s, 0), gpu(s, 1)));
}

TEST_CASE("Azure, OCI and AWS g5 files: counts and path types", "[topology]") {
  System ndv4 = load("azure-ndv4-topo.xml", 80, 200000);
  CHECK(ndv4.count(NodeType::Gpu) == 8);
  CHECK(ndv4.count(NodeType::Net) == 8);
  CHECK(ndv4.count(NodeType::Cpu) == 4);
  Paths p4(ndv4);
  CHECK(p4.at(gpu(ndv4, 0), gpu(ndv4, 1)).type == PathType::Pix);
  CHECK(p4.at(gpu(ndv4, 0), gpu(ndv4, 1)).bw == Approx(24));
  CHECK(p4.at(gpu(ndv4, 0), gpu(ndv4, 2)).type == PathType::Sys);
  CHECK(p4.at(gpu(ndv4, 0), gpu(ndv4, 2)).bw == Approx(16));  // AMD inter-socket
  CHECK(p4.at(gpu(ndv4, 0), net(ndv4, 0)).type == PathType::Pix);
  CHECK(nearestNet(p4, gpu(ndv4, 0)) == net(ndv4, 0));
  Graph g4 = searchGraph(p4, SearchRequest{});
  checkVisitsAll(ndv4, g4);
  for (const Channel& c : g4.channels)
    for (int pair = 0; pair < 4; ++pair) CHECK(adjacent(c, 2 * pair, 2 * pair + 1));

  System ndv2 = load("azure-ndv2-topo.xml", 70, 100000);
  CHECK(ndv2.count(NodeType::Gpu) == 8);
  CHECK(ndv2.count(NodeType::Net) == 1);
  CHECK(ndv2.count(NodeType::Cpu) == 2);
  Paths p2(ndv2);
  CHECK(p2.at(gpu(ndv2, 0), gpu(ndv2, 3)).type == PathType::Phb);
  CHECK(p2.at(gpu(ndv2, 0), gpu(ndv2, 4)).type == PathType::Sys);
  CHECK(p2.at(gpu(ndv2, 5), net(ndv2, 0)).type == PathType::Sys);

  System oci = load("oci-topo-flattened.xml", 80, 100000);
  CHECK(oci.count(NodeType::Gpu) == 8);
  CHECK(oci.count(NodeType::Net) == 8);
  CHECK(oci.count(NodeType::Cpu) == 4);
  Paths po(oci);
  CHECK(po.at(gpu(oci, 0), gpu(oci, 1)).type == PathType::Pix);
  CHECK(po.at(gpu(oci, 1), gpu(oci, 2)).type == PathType::Sys);

  System g5 = load("aws-g5.48xl-topo.xml", 86);
  CHECK(g5.count(NodeType::Gpu) == 0);  // bare bus ids: no class, nothing to assume from
  CHECK(g5.count(NodeType::Cpu) == 2);
  Graph none = searchGraph(Paths(g5), SearchRequest{});
  CHECK(none.channels.empty());
}

TEST_CASE("Alibaba HGX A100 subsets: NVSwitch and 3-level PLX switches", "[topology]") {
  System s2 = load("aliyun-SimAI-topo_2A100_1CX6.xml");
  CHECK(s2.count(NodeType::Gpu) == 2);
  CHECK(s2.count(NodeType::Net) == 2);
  CHECK(s2.count(NodeType::Cpu) == 1);
  Paths p2(s2);
  CHECK(p2.at(gpu(s2, 0), gpu(s2, 1)).type == PathType::Nvl);
  CHECK(p2.at(gpu(s2, 0), gpu(s2, 1)).bw == Approx(12 * 20.0));  // 6 switches x 2 links
  CHECK(p2.at(gpu(s2, 0), net(s2, 0)).type == PathType::Phb);    // mlx5_bond_0 sits on the CPU
  CHECK(p2.at(gpu(s2, 1), net(s2, 1)).type == PathType::Pxb);
  CHECK(nearestNet(p2, gpu(s2, 1)) == net(s2, 1));

  System s4 = load("aliyun-SimAI-topo_4A100_2CX6.xml");
  CHECK(s4.count(NodeType::Gpu) == 4);
  Paths p4(s4);
  Graph g = searchGraph(p4, SearchRequest{});
  checkVisitsAll(s4, g);
  CHECK(g.typeIntra == PathType::Nvl);
  CHECK(g.bwIntra * g.channels.size() <= 240 + 1e-6);
  CHECK(g.bwIntra * g.channels.size() >= 200);
  SearchRequest tree;
  tree.pattern = Pattern::BalancedTree;
  Graph t = searchGraph(p4, tree);
  CHECK(t.id == 1);
  checkVisitsAll(s4, t);
}

TEST_CASE("Every shared topology file survives write and read unchanged", "[topology]") {
  for (const char* f : {"aws-p4d-24xl-topo.xml", "aws-g5.48xl-topo.xml", "azure-ndv4-topo.xml", "azure-ndv2-topo.xml",
                        "oci-topo-flattened.xml", "ibm-cloud-gx3d-160x1792x8h100-topo.xml",
                        "aliyun-SimAI-topo_2A100_1CX6.xml", "aliyun-SimAI-topo_4A100_2CX6.xml"}) {
    INFO(f);
    XmlNode doc = readXmlFile(data(f));
    braid::test::TempDir dir;
    std::string out = dir.file("dump.xml");
    writeXmlFile(out, doc);
    XmlNode again = readXmlFile(out);
    CHECK(writeXml(again.children.at(0)) == writeXml(doc.children.at(0)));
    assumeDevices(again, DeviceAssumptions{80, 100000});
    assumeDevices(doc, DeviceAssumptions{80, 100000});
    CHECK(buildSystem(again, out).describe() == buildSystem(doc, f).describe());
  }
}

TEST_CASE("Malformed topology files give the line and the reason", "[topology]") {
  CHECK_THAT(errorOf("<system>\n<cpu numaid=\"0\">\n</system>"), Catch::Contains("t.xml:3") && Catch::Contains("closes <cpu>"));
  CHECK_THAT(errorOf("<system><cpu numaid=\"0\">"), Catch::Contains("never closed"));
  CHECK_THAT(errorOf("<system>\n<cpu numaid=\"0\"><gpux/></cpu></system>"),
             Catch::Contains("t.xml:2") && Catch::Contains("<gpux> inside <cpu>"));
  CHECK_THAT(errorOf("<system><cpu/></system>"), Catch::Contains("no 'numaid' attribute"));
  CHECK_THAT(errorOf("<system><cpu numaid=\"zero\"/></system>"), Catch::Contains("not an integer"));
  CHECK_THAT(errorOf("<system><cpu numaid=0/></system>"), Catch::Contains("not quoted"));
  CHECK_THAT(errorOf("<system><cpu numaid=\"0\"><pci busid=\"nonsense\"/></cpu></system>"),
             Catch::Contains("not a PCI bus id"));
  const std::string gpuOpen =
      "<system><cpu numaid=\"0\"><pci busid=\"0000:01:00.0\" class=\"0x030200\"><gpu dev=\"0\" sm=\"90\">";
  const std::string gpuClose = "</gpu></pci></cpu></system>";
  CHECK_THAT(errorOf(gpuOpen + "<nvlink target=\"0000:01:00.0\" count=\"2\"/>" + gpuClose), Catch::Contains("to itself"));
  CHECK_THAT(errorOf(gpuOpen + "<nvlink target=\"0000:02:00.0\" count=\"1000\"/>" + gpuClose),
             Catch::Contains("out of range"));
  CHECK_THAT(errorOf(gpuOpen + "<nvlink count=\"2\"/>" + gpuClose), Catch::Contains("no 'target'"));
  // An NVLink to a GPU that isn't there: WARN and dropped, the GPU keeps only its PCI link.
  System s = buildSystem(parseXml(gpuOpen + "<nvlink target=\"0000:09:00.0\" count=\"2\" tclass=\"0x030200\"/>" + gpuClose, "t"), "t");
  REQUIRE(s.count(NodeType::Gpu) == 1);
  CHECK(s.nodes[s.of(NodeType::Gpu)[0]].links.size() == 1);
  CHECK_THAT(errorOf("<system><cpu numaid=\"0\"><pci busid=\"0000:01:00.0\"/><pci busid=\"0000:01:00.0\"/></cpu></system>"),
             Catch::Contains("appears twice"));
  CHECK_THAT(errorOf("<system><cpu numaid=\"0\"/></system><system/>"), Catch::Contains("a second <system>"));
  CHECK_THAT(errorOf("<graphs/>"), Catch::Contains("expected <system>"));
  // Depth, size and element count are bounded: no recursion or memory without limit.
  std::string deep;
  for (int i = 0; i < 100000; ++i) deep += "<pci>";
  CHECK_THAT(errorOf(deep), Catch::Contains("nested deeper than"));
  std::string many = "<system>";
  for (int i = 0; i < 300000; ++i) many += "<x/>";
  CHECK_THAT(errorOf(many + "</system>"), Catch::Contains("more than 200000 elements"));
  CHECK_THAT(errorOf(std::string(17u << 20, ' ')), Catch::Contains("more than"));
  braid::test::TempDir dir;
  try {
    readXmlFile(dir.path() + "/missing.xml");
    FAIL("no error");
  } catch (const braid::Error& e) {
    CHECK(e.code() == ncclSystemError);
    CHECK_THAT(e.what(), Catch::Contains("missing.xml"));
  }
}

TEST_CASE("Attributes: 200k in one element parse in linear time; a repeated one is named", "[topology]") {
  // A check comparing each attribute with those before it took 2.6 to 6 s for 40k attributes:
  // 200k (2.6 MB, well under the 16 MiB cap) would take minutes; linear, 0.1 to 0.5 s (a
  // sanitized build, several times that: its bound is looser, still far below the quadratic).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  constexpr double kBound = 10.0;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
  constexpr double kBound = 10.0;
#else
  constexpr double kBound = 2.0;
#endif
#else
  constexpr double kBound = 2.0;
#endif
  std::string text = "<system version=\"1\"><cpu numaid=\"0\"";
  constexpr int kAttributes = 200000;
  for (int i = 0; i < kAttributes; ++i) text += " a" + std::to_string(i) + "=\"" + std::to_string(i % 10) + "\"";
  const std::string element = text + "/></system>";
  auto start = std::chrono::steady_clock::now();
  XmlNode doc = parseXml(element, "many.xml");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO("parsing " << kAttributes << " attributes took " << seconds << " s");
  CHECK(seconds < kBound);
  REQUIRE(doc.children.size() == 1);
  REQUIRE(doc.children[0].children.size() == 1);
  CHECK(doc.children[0].children[0].attrs.size() == kAttributes + 1);
  start = std::chrono::steady_clock::now();
  CHECK_THAT(errorOf(text + " a199999=\"x\"/></system>"),
             Catch::Contains("attribute 'a199999' repeated in <cpu>"));
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < kBound);
  CHECK_THAT(errorOf("<system><cpu numaid=\"0\" numaid=\"1\"/></system>"), Catch::Contains("'numaid' repeated"));
}

TEST_CASE("Dump files: a symbolic link is refused and what it points to left as it is", "[topology]") {
  braid::test::TempDir dir;
  const std::string target = dir.write("precious.txt", "keep me\n");
  const std::string link = dir.file("dump.xml");
  REQUIRE(symlink(target.c_str(), link.c_str()) == 0);
  const XmlNode document = parseXml("<system version=\"1\"><cpu numaid=\"0\"/></system>", "t.xml");
  try {
    writeXmlFile(link, document);
    FAIL("a symbolic link was written through");
  } catch (const braid::Error& e) {
    CHECK(e.code() == ncclSystemError);
    CHECK_THAT(e.what(), Catch::Contains(link) && Catch::Contains("symbolic link"));
  }
  std::ifstream in(target);
  std::string kept((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(kept == "keep me\n");
  const std::string plain = dir.file("plain.xml");  // (a plain file is written, and read back)
  writeXmlFile(plain, document);
  CHECK(readXmlFile(plain).children.at(0).name == "system");
}

TEST_CASE("Path levels parse as NCCL's names and legacy integers", "[topology]") {
  PathType t;
  CHECK((parsePathLevel("PHB", &t) && t == PathType::Phb));
  CHECK((parsePathLevel("nvl", &t) && t == PathType::Nvl));
  CHECK((parsePathLevel("0", &t) && t == PathType::Loc));
  CHECK((parsePathLevel("1", &t) && t == PathType::Pix));
  CHECK((parsePathLevel("2", &t) && t == PathType::Pxb));
  CHECK((parsePathLevel("3", &t) && t == PathType::Phb));
  CHECK((parsePathLevel("9", &t) && t == PathType::Sys));
  CHECK_FALSE(parsePathLevel("fast", &t));
  CHECK_FALSE(parsePathLevel("-1", &t));
  CHECK_FALSE(parsePathLevel("", &t));
}

TEST_CASE("Graphs write in NCCL's format and read back", "[topology]") {
  System s = load("ibm-cloud-gx3d-160x1792x8h100-topo.xml");
  Paths p(s);
  SearchRequest r;
  r.nodes = 2;
  Graph ring = searchGraph(p, r);
  r.pattern = Pattern::BalancedTree;
  Graph tree = searchGraph(p, r);
  std::string text = writeXml(graphsToXml({ring, tree}).children.at(0));
  CHECK_THAT(text, Catch::Contains("<graphs version=\"1\">"));
  CHECK_THAT(text, Catch::Contains("pattern=\"4\""));
  CHECK_THAT(text, Catch::Contains("typeintra=\"NVL\""));
  std::vector<Graph> back = graphsFromXml(parseXml(text, "g.xml"), "g.xml", s);
  REQUIRE(back.size() == 2);
  CHECK(describeGraph(back[0]) == describeGraph(ring));
  CHECK(describeGraph(back[1]) == describeGraph(tree));
  auto bad = [&](const std::string& xml) {
    try {
      graphsFromXml(parseXml(xml, "g.xml"), "g.xml", s);
    } catch (const braid::Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  const std::string head =
      "<graphs version=\"1\"><graph id=\"0\" pattern=\"4\" crossnic=\"0\" nchannels=\"1\" speedintra=\"20\" "
      "speedinter=\"20\" latencyinter=\"0\" typeintra=\"NVL\" typeinter=\"PIX\" samechannels=\"1\">";
  std::string all;
  for (int d = 0; d < 8; ++d) all += "<gpu dev=\"" + std::to_string(d) + "\"/>";
  CHECK(bad(head + "<channel>" + all + "</channel></graph></graphs>") == "(no error)");
  CHECK_THAT(bad(head + "<channel><gpu dev=\"9\"/></channel></graph></graphs>"), Catch::Contains("GPU dev 9 is not in the system"));
  CHECK_THAT(bad(head + "<channel><gpu dev=\"0\"/></channel></graph></graphs>"), Catch::Contains("lists 1 of the system's 8 GPUs"));
  CHECK_THAT(bad(head + "<channel><net dev=\"42\"/>" + all + "</channel></graph></graphs>"), Catch::Contains("net dev 42"));
  CHECK_THAT(bad(head + "</graph></graphs>"), Catch::Contains("nchannels=\"1\" but 0"));
  CHECK_THAT(bad("<graphs><graph id=\"0\" pattern=\"4\" crossnic=\"0\" nchannels=\"1\" speedintra=\"x\"/></graphs>"),
             Catch::Contains("speedintra=\"x\""));
}

TEST_CASE("Detection on this machine finds its CPUs and interfaces", "[topology][detect]") {
  DetectOptions o;
  o.nvmlLibrary = "libbraid-no-such-nvml.so";
  o.verbsLibrary = "libbraid-no-such-verbs.so";
  XmlNode doc = detectSystem(o);
  System s = buildSystem(doc, "detection");
  CHECK(s.count(NodeType::Cpu) >= 1);
  CHECK(s.count(NodeType::Net) >= 1);  // at least one interface with an address
  CHECK(s.count(NodeType::Gpu) == 0);
  // The document is NCCL's format: it survives a write and a read.
  XmlNode again = parseXml(writeXml(doc.children.at(0)), "again");
  CHECK(buildSystem(again, "again").describe() == s.describe());
}

TEST_CASE("Network ports of a rank's connections follow the graphs; send/recv the GPU's nearest port",
          "[topology][search]") {
  TopologyRequest r;
  r.topoFile = data("ibm-cloud-gx3d-160x1792x8h100-topo.xml");
  r.detect = false;
  r.nodes = 2;
  auto t = loadTopology(r);
  const System& s = t->system;
  auto nameOf = [&](int netDev) { return "mlx5_" + std::to_string(netDev) + ":1"; };  // (the file's names)
  for (int k = 0; k < 8; ++k) {
    INFO("GPU " << k);
    const PortPlan byBus = planPorts(*t, s.nodes[gpu(s, k)].busId, -1);
    REQUIRE(byBus.ringIn.size() == t->ring.channels.size());
    REQUIRE(byBus.ringOut.size() == t->ring.channels.size());
    for (size_t c = 0; c < t->ring.channels.size(); ++c) {
      CHECK(byBus.ringIn[c] == nameOf(t->ring.channels[c].netIn));
      CHECK(byBus.ringOut[c] == nameOf(t->ring.channels[c].netOut));
    }
    REQUIRE(byBus.tree.size() == t->tree.channels.size());
    for (size_t c = 0; c < t->tree.channels.size(); ++c) CHECK(byBus.tree[c] == nameOf(t->tree.channels[c].netIn));
    CHECK(byBus.near == std::vector<std::string>{nameOf(7 - k)});  // the port on the GPU's own switch
    CHECK(planPorts(*t, "", k).near == byBus.near);                 // no bus id: the GPU of that dev
  }
  // A rank whose GPU the file lacks: the graphs' ports, none preferred for send/recv.
  const PortPlan none = planPorts(*t, "0000:01:00.0", -1);
  CHECK(none.near.empty());
  CHECK(none.ringIn.size() == t->ring.channels.size());
  // One machine: no channel crosses a port.
  r.nodes = 1;
  CHECK(planPorts(*loadTopology(r), s.nodes[gpu(s, 0)].busId, -1).ringIn.empty());
}

TEST_CASE("Detection through NVML and verbs doubles", "[topology][detect]") {
  std::vector<DetectedDevice> gpus = detectNvmlGpus(env("BRAID_FAKE_NVML"));
  REQUIRE(gpus.size() == 4);
  CHECK(gpus[0].busId == "0000:1a:00.0");
  CHECK(gpus[0].element.attrOr("sm", "") == "90");
  DetectOptions o;
  o.nvmlLibrary = env("BRAID_FAKE_NVML");
  o.verbsLibrary = env("BRAID_FAKE_VERBS");
  System s = buildSystem(detectSystem(o), "detection");
  REQUIRE(s.count(NodeType::Gpu) == 4);
  CHECK(s.count(NodeType::Nvs) == 1);
  Paths p(s);
  CHECK(p.at(gpu(s, 0), gpu(s, 1)).type == PathType::Nvl);
  CHECK(p.at(gpu(s, 0), gpu(s, 1)).bw == Approx(4 * 20.6));  // direct, 4 links
  CHECK(p.at(gpu(s, 0), gpu(s, 2)).type == PathType::Nvl);
  CHECK(p.at(gpu(s, 0), gpu(s, 2)).bw == Approx(2 * 20.6));  // through the NVSwitch, 2 links
  // Verbs: mlx5_0 port 1 (200 Gb/s IB) and mlx5_1 port 1 (400 Gb/s RoCE); the down port and
  // the Ethernet interfaces are not network ports when RDMA ports exist.
  REQUIRE(s.count(NodeType::Net) == 2);
  CHECK(s.nodes[net(s, 0)].netName == "mlx5_0");
  CHECK(s.nodes[net(s, 0)].netBw == Approx(25));
  CHECK(s.nodes[net(s, 1)].netName == "mlx5_1");
  CHECK(s.nodes[net(s, 1)].netBw == Approx(50));
  CHECK(s.nodes[net(s, 0)].guid == 0x1000);
  // A file naming one of these GPUs as a bare PCI device is completed with its <gpu>.
  XmlNode file = parseXml("<system version=\"1\"><cpu numaid=\"0\"><pci busid=\"0000:1a:00.0\" class=\"0x030200\" "
                          "link_speed=\"32.0 GT/s PCIe\" link_width=\"16\"/></cpu></system>", "f");
  completeFromDetection(file, detectSystem(o));
  System completed = buildSystem(file, "f");
  REQUIRE(completed.count(NodeType::Gpu) == 1);
  CHECK(completed.nodes[completed.of(NodeType::Gpu)[0]].sm == 90);
  CHECK(completed.count(NodeType::Net) == 0);  // devices the file doesn't name are not added
}

TEST_CASE("NCCL_IB_HCA: prefixes, exact names, ports, exclusion; bad entries are named and ignored",
          "[topology][detect]") {
  using braid::net::HcaFilter;
  CHECK(HcaFilter::parse("").matches("mlx5_0", 1));
  const HcaFilter prefix = HcaFilter::parse("mlx5");
  CHECK(prefix.matches("mlx5_0", 1));
  CHECK(prefix.matches("mlx5_10", 2));
  CHECK_FALSE(prefix.matches("bnxt_re0", 1));
  const HcaFilter exact = HcaFilter::parse("=mlx5_1:1,mlx5_2");
  CHECK(exact.matches("mlx5_1", 1));
  CHECK_FALSE(exact.matches("mlx5_1", 2));
  CHECK_FALSE(exact.matches("mlx5_10", 1));
  CHECK(exact.matches("mlx5_2", 2));
  const HcaFilter except = HcaFilter::parse("^=mlx5_1:2");
  CHECK(except.matches("mlx5_1", 1));
  CHECK_FALSE(except.matches("mlx5_1", 2));
  CHECK(except.matches("mlx5_0", 2));
  const HcaFilter bad = HcaFilter::parse("mlx5_0:x,:1,mlx5_1:0,mlx5_2:256,mlx5_3:");
  CHECK(bad.entries.empty());
  REQUIRE(bad.problems.size() == 5);
  CHECK_THAT(bad.problems[0], Catch::Contains("'mlx5_0:x'") && Catch::Contains("from 1 to 255"));
  CHECK_THAT(bad.problems[1], Catch::Contains("names no device"));
  CHECK(bad.matches("anything", 1));  // nothing valid listed: every port, as when unset

  // Detection through the verbs double honours it: mlx5_0 port 1 and mlx5_1 port 1 are active.
  auto ports = [](const std::string& hca) {
    std::vector<std::string> out;
    for (const DetectedDevice& d : detectVerbsPorts(env("BRAID_FAKE_VERBS"), "", hca))
      for (const XmlNode& n : d.element.children) out.push_back(n.attrOr("name", "") + ":" + n.attrOr("port", ""));
    return out;
  };
  if (env("BRAID_FAKE_VERBS").find("/nonexistent/") != std::string::npos) return;  // built without verbs headers
  CHECK(ports("") == std::vector<std::string>{"mlx5_0:1", "mlx5_1:1"});
  CHECK(ports("=mlx5_1") == std::vector<std::string>{"mlx5_1:1"});
  CHECK(ports("^mlx5_0") == std::vector<std::string>{"mlx5_1:1"});
  CHECK(ports("mlx5_1:2").empty());
}

TEST_CASE("braid-topo shows a file's machine and honours NCCL's variables", "[topology][tools]") {
  const std::string topo = env("BRAID_TOPO_EXE");
  braid::test::TempDir dir;
  const std::string ibm = data("ibm-cloud-gx3d-160x1792x8h100-topo.xml");
  const std::string dump = dir.file("topo.xml"), graphs = dir.file("graphs.xml"), dot = dir.file("g.dot");
  std::string out = run("NCCL_TOPO_DUMP_FILE=" + dump + " NCCL_GRAPH_DUMP_FILE=" + graphs + " " + topo +
                        " --no-detect --topo-file " + ibm + " --dot " + dot);
  CHECK_THAT(out, Catch::EndsWith("exit=0\n"));
  CHECK_THAT(out, Catch::Contains("8 GPUs, 8 network ports, 2 NUMA nodes"));
  CHECK_THAT(out, Catch::Contains("+ NVL[370.8] - NVS/0"));
  CHECK_THAT(out, Catch::Contains("NVL/370.8"));
  CHECK_THAT(out, Catch::Contains("Pattern 4, crossNic 0"));
  CHECK_THAT(out, Catch::Contains("type NVL/LOC"));
  CHECK(buildSystem(readXmlFile(dump), dump).describe() == buildSystem(readXmlFile(ibm), ibm).describe());
  XmlNode g = readXmlFile(graphs);
  REQUIRE(g.child("graphs"));
  CHECK(g.child("graphs")->children.size() == 2);
  std::string dotText = run("cat " + dot);
  CHECK_THAT(dotText, Catch::Contains("graph braid_topology"));
  CHECK_THAT(dotText, Catch::Contains("label=\"NVL 370.8\""));
  // NCCL_GRAPH_FILE replaces the search: a hand-written single-channel ring is used as given.
  std::string ringFile = dir.write("ring.xml",
      "<graphs version=\"1\"><graph id=\"0\" pattern=\"4\" crossnic=\"0\" nchannels=\"1\" speedintra=\"20\" "
      "speedinter=\"20\" latencyinter=\"0\" typeintra=\"NVL\" typeinter=\"LOC\" samechannels=\"1\"><channel>"
      "<gpu dev=\"7\"/><gpu dev=\"6\"/><gpu dev=\"5\"/><gpu dev=\"4\"/><gpu dev=\"3\"/><gpu dev=\"2\"/><gpu dev=\"1\"/>"
      "<gpu dev=\"0\"/></channel></graph></graphs>");
  out = run("NCCL_GRAPH_FILE=" + ringFile + " " + topo + " --no-detect --topo-file " + ibm);
  CHECK_THAT(out, Catch::Contains(" 0 : GPU/7 GPU/6 GPU/5 GPU/4 GPU/3 GPU/2 GPU/1 GPU/0\n"));
  CHECK_THAT(out, Catch::Contains("nChannels 1, bw 20.000000/20.000000"));
  // Decisions follow NCCL_P2P_LEVEL / NCCL_P2P_DISABLE.
  const std::string p4d = data("aws-p4d-24xl-topo.xml");
  out = run("NCCL_P2P_LEVEL=PIX " + topo + " --no-detect --topo-file " + p4d + " --assume-gpu sm80 --assume-nic 100G");
  CHECK_THAT(out, Catch::Contains("P2P (level PIX):\n  GPU/0    - 1 0 0 0 0 0 0\n"));
  out = run("NCCL_P2P_DISABLE=1 " + topo + " --no-detect --topo-file " + p4d + " --assume-gpu sm80");
  CHECK_THAT(out, Catch::Contains("P2P (level LOC, disabled):\n  GPU/0    - 0 0 0 0 0 0 0\n"));
  out = run("NCCL_P2P_LEVEL=sideways " + topo + " --no-detect --topo-file " + p4d + " --assume-gpu sm80");
  CHECK_THAT(out, Catch::Contains("NCCL_P2P_LEVEL=\"sideways\" is not a path level"));
  // Bad input: a clear message and a failing exit status.
  CHECK_THAT(run(topo + " --assume-gpu banana"), Catch::Contains("expected an SM architecture") && Catch::EndsWith("exit=2\n"));
  CHECK_THAT(run(topo + " --frobnicate"), Catch::Contains("unknown argument --frobnicate") && Catch::EndsWith("exit=2\n"));
  CHECK_THAT(run(topo + " --no-detect --topo-file " + dir.path() + "/absent.xml"),
             Catch::Contains("cannot open") && Catch::EndsWith("exit=1\n"));
  // Detection of this machine works without any file.
  CHECK_THAT(run(topo), Catch::Contains("Braid topology: detection") && Catch::EndsWith("exit=0\n"));
}

TEST_CASE("hwloc and sysfs agree on this machine's NUMA nodes", "[topology][detect]") {
  CHECK(cpuMaskText({0, 1, 2, 3, 32}) == "00000001,0000000f");
  CHECK(cpuMaskText({7}) == "00000080");
  std::vector<NumaNode> hw = detectHwlocNumaNodes("libhwloc.so.15");
  if (hw.empty()) {
    WARN("skipped: libhwloc.so.15 is not installed here, so only sysfs can be checked");
    return;
  }
  DetectOptions withHwloc, sysfsOnly;
  withHwloc.nvmlLibrary = sysfsOnly.nvmlLibrary = "libbraid-no-such-nvml.so";
  withHwloc.verbsLibrary = sysfsOnly.verbsLibrary = "libbraid-no-such-verbs.so";
  sysfsOnly.hwlocLibrary = "libbraid-no-such-hwloc.so";
  XmlNode a = detectSystem(withHwloc), b = detectSystem(sysfsOnly);
  const XmlNode& sa = a.children.at(0);
  const XmlNode& sb = b.children.at(0);
  REQUIRE(sa.children.size() == sb.children.size());
  for (size_t i = 0; i < sa.children.size(); ++i) {
    CHECK(sa.children[i].attrOr("numaid", "a") == sb.children[i].attrOr("numaid", "b"));
    // sysfs may pad the mask to the kernel's CPU count, or not pad it at all: compare the bits.
    auto bits = [](std::string mask) {
      mask.erase(std::remove(mask.begin(), mask.end(), ','), mask.end());
      mask.erase(0, std::min(mask.find_first_not_of('0'), mask.size()));
      return mask;
    };
    CHECK(bits(sa.children[i].attrOr("affinity", "")) == bits(sb.children[i].attrOr("affinity", "")));
    CHECK_FALSE(bits(sa.children[i].attrOr("affinity", "")).empty());
  }
}

TEST_CASE("PCI paths from sysfs: one switch is PIX, more bridges PXB, one root complex PHB, NUMA nodes SYS",
          "[topology]") {
  namespace fs = std::filesystem;
  braid::test::TempDir dir;
  const std::string root = dir.path();
  const std::string pci = root + "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0";  // root port, switch up
  // A device dir under `at`, named by its bus id, linked from /sys/bus/pci/devices, on NUMA node `numa`.
  auto device = [&](const std::string& at, const std::string& busId, int numa) {
    fs::create_directories(at + "/" + busId);
    std::ofstream(at + "/" + busId + "/numa_node") << numa << "\n";
    fs::create_directories(root + "/sys/bus/pci/devices");
    fs::create_directory_symlink(at + "/" + busId, root + "/sys/bus/pci/devices/" + busId);
  };
  auto nic = [&](const std::string& name, const std::string& busId) {
    fs::create_directories(root + "/sys/class/infiniband/" + name);
    fs::create_directory_symlink(fs::canonical(root + "/sys/bus/pci/devices/" + busId),
                                 root + "/sys/class/infiniband/" + name + "/device");
  };
  device(pci + "/0000:02:00.0", "0000:03:00.0", 0);                              // the GPU: switch down port A
  device(pci + "/0000:02:01.0", "0000:04:00.0", 0);                              // switch down port B
  device(pci + "/0000:02:02.0/0000:05:00.0/0000:06:00.0", "0000:07:00.0", 0);   // a second switch below
  device(root + "/sys/devices/pci0000:00/0000:00:02.0", "0000:08:00.0", 0);     // another root port
  device(root + "/sys/devices/pci0000:40/0000:40:01.0", "0000:41:00.0", 0);     // another root complex, node 0
  device(root + "/sys/devices/pci0000:80/0000:80:01.0", "0000:81:00.0", 1);     // node 1
  nic("mlx5_0", "0000:04:00.0");
  const auto gpu = pciChain(busIdText((0x03 << 8) | (0 << 3)), root);
  REQUIRE(gpu == std::vector<std::string>{"pci0000:00", "0000:00:01.0", "0000:01:00.0", "0000:02:00.0", "0000:03:00.0"});
  CHECK(pciPathBetween(gpu, ibDeviceChain("mlx5_0", root), root) == PathType::Pix);
  CHECK(pciPathBetween(gpu, pciChain("0000:07:00.0", root), root) == PathType::Pxb);
  CHECK(pciPathBetween(gpu, pciChain("0000:08:00.0", root), root) == PathType::Phb);
  CHECK(pciPathBetween(gpu, pciChain("0000:41:00.0", root), root) == PathType::Phb);
  CHECK(pciPathBetween(gpu, pciChain("0000:81:00.0", root), root) == PathType::Sys);
  // Unknown to sysfs: no path.
  CHECK(pciPathBetween(gpu, ibDeviceChain("mlx5_9", root), root) == PathType::Dis);
  CHECK(pciPathBetween(pciChain(busIdText(-1), root), gpu, root) == PathType::Dis);
  CHECK(busIdText((int64_t(1) << 16) | (0x17 << 8) | (2 << 3) | 1) == "0001:17:02.1");
  fs::remove_all(root + "/sys");
}

TEST_CASE("A net plugin's devices are the NICs: under their PCI path when sysfs has it, else under the CPU",
          "[topology][detect]") {
  namespace fs = std::filesystem;
  braid::test::TempDir dir;
  const std::string root = dir.path();
  const std::string rootPort = "/sys/devices/pci0000:00/0000:00:01.0";
  fs::create_directories(root + rootPort + "/0000:01:00.0");
  std::ofstream(root + rootPort + "/class") << "0x060400\n";
  std::ofstream(root + rootPort + "/0000:01:00.0/class") << "0x020000\n";
  std::ofstream(root + rootPort + "/0000:01:00.0/max_link_speed") << "16.0 GT/s PCIe\n";
  std::ofstream(root + rootPort + "/0000:01:00.0/max_link_width") << "16\n";
  fs::create_directories(root + "/sys/bus/pci/devices");
  fs::create_directory_symlink(root + rootPort + "/0000:01:00.0", root + "/sys/bus/pci/devices/0000:01:00.0");
  fs::create_directory_symlink(root + rootPort, root + "/sys/bus/pci/devices/0000:00:01.0");

  std::vector<braid::plugin::NetDeviceProperties> devices(3);
  devices[0].name = "fabric0";
  devices[0].pciPath = rootPort + "/0000:01:00.0";  // (as NCCL's plugins give it: a sysfs path)
  devices[0].guid = 0xabc;
  devices[0].port = 1;
  devices[0].speedMbps = 400000;
  devices[0].ptrSupport = 0x1 | 0x2;  // NCCL_PTR_HOST | NCCL_PTR_CUDA
  devices[0].maxComms = 1024;
  devices[1].name = "fabric1";      // virtual: no PCI path
  devices[1].port = 2;
  devices[1].speedMbps = 100000;
  devices[1].ptrSupport = 0x1;
  devices[2].name = "fabric2";
  devices[2].pciPath = "/sys/devices/pci0000:00/0000:00:09.0/0000:0A:00.0";  // sysfs does not know it
  devices[2].speedMbps = 25000;

  const std::vector<DetectedDevice> ports = pluginNetPorts(devices);
  REQUIRE(ports.size() == 3);
  CHECK(ports[0].busId == "0000:01:00.0");
  CHECK(ports[1].busId.empty());
  CHECK(ports[2].busId == "0000:0a:00.0");
  REQUIRE(ports[0].element.children.size() == 1);
  const XmlNode& net0 = ports[0].element.children[0];
  CHECK(net0.attrOr("name", "") == "fabric0");
  CHECK(net0.attrOr("dev", "") == "0");
  CHECK(net0.attrOr("speed", "") == "400000");
  CHECK(net0.attrOr("port", "") == "1");
  CHECK(net0.attrOr("guid", "") == "0xabc");
  CHECK(net0.attrOr("maxconn", "") == "1024");
  CHECK(net0.attrOr("gdr", "") == "1");
  CHECK(ports[1].element.children.at(0).attrOr("gdr", "") == "0");

  DetectOptions o;
  o.sysRoot = root;
  o.nvmlLibrary = "libbraid-no-such-nvml.so";
  o.hwlocLibrary = "libbraid-no-such-hwloc.so";
  o.verbsLibrary = env("BRAID_FAKE_VERBS");  // (its RDMA ports are replaced by the plugin's)
  o.netPluginDevices = devices;
  const System s = buildSystem(detectSystem(o), "detection");
  REQUIRE(s.count(NodeType::Net) == 3);
  REQUIRE(s.count(NodeType::Nic) == 3);
  const Node& n0 = s.nodes[net(s, 0)];
  CHECK(n0.netName == "fabric0");
  CHECK(n0.netBw == Approx(50));
  CHECK(n0.port == 1);
  CHECK(n0.guid == 0xabc);
  CHECK(n0.netGdr);
  CHECK(n0.maxConn == 1024);
  CHECK(s.nodes[net(s, 1)].netName == "fabric1");
  CHECK(s.nodes[net(s, 1)].netBw == Approx(12.5));
  CHECK_FALSE(s.nodes[net(s, 1)].netGdr);
  CHECK(s.nodes[net(s, 2)].netName == "fabric2");
  // Where each NIC hangs: fabric0 below its root port, fabric1 and fabric2 on the CPU.
  auto nicOf = [&](int netNode) {
    for (const Link& l : s.nodes[netNode].links)
      if (s.nodes[l.to].type == NodeType::Nic) return l.to;
    return -1;
  };
  auto above = [&](int nic) {
    std::string out;
    for (const Link& l : s.nodes[nic].links)
      if (s.nodes[l.to].type != NodeType::Net) out += s.nodes[l.to].label() + " ";
    return out;
  };
  CHECK(s.nodes[nicOf(net(s, 0))].busId == "0000:01:00.0");
  CHECK(above(nicOf(net(s, 0))) == "PCI/0000:00:01.0 ");
  CHECK(above(nicOf(net(s, 1))) == "CPU/0 ");
  CHECK(s.nodes[nicOf(net(s, 2))].busId == "0000:0a:00.0");
  CHECK(above(nicOf(net(s, 2))) == "CPU/0 ");
  // No plugin devices: the RDMA ports of the verbs double (or, without it, Ethernet) as before.
  o.netPluginDevices.clear();
  const System without = buildSystem(detectSystem(o), "detection");
  for (int n : without.of(NodeType::Net)) CHECK(without.nodes[n].netName.rfind("fabric", 0) == std::string::npos);
  CHECK(without.count(NodeType::Net) >= 1);
  fs::remove_all(root + "/sys");
}
