// braid-topo: shows the machine as Braid sees it — nodes and links, the path matrix, the
// P2P/GDR decisions and the ring and tree channels — and draws it with Graphviz.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "core/init.h"
#include "core/status.h"
#include "topology/topology.h"

namespace {

const char* const kUsage =
    "usage: braid-topo [--topo-file F] [--assume-gpu smNN] [--assume-nic SPEED] [--nodes N]\n"
    "                  [--no-detect] [--dot F] [--svg F | --png F]\n"
    "  --topo-file F     read NCCL topology XML F (default: NCCL_TOPO_FILE, else detect this machine)\n"
    "  --assume-gpu ARCH PCI devices of class 0x03 without <gpu> are GPUs of ARCH (sm80, sm90, 90)\n"
    "  --assume-nic SPEED PCI devices of class 0x02 without <nic> are ports of SPEED (200G, 400G, 25000 Mb/s)\n"
    "  --nodes N         search channels for N machines like this one (adds network ports)\n"
    "  --no-detect       use the file alone (no completion from this machine)\n"
    "  --dot F           write the graph in Graphviz DOT\n"
    "  --svg F, --png F  render it with Graphviz's dot (Debian: apt-get install graphviz)\n"
    "Honours NCCL_TOPO_FILE, NCCL_TOPO_DUMP_FILE, NCCL_GRAPH_FILE, NCCL_GRAPH_DUMP_FILE, NCCL_P2P_LEVEL,\n"
    "NCCL_P2P_DISABLE, NCCL_NET_GDR_LEVEL, NCCL_CROSS_NIC, NCCL_SHM_DISABLE as the library does.\n";

[[noreturn]] void usage(const std::string& problem) {
  fprintf(stderr, "braid-topo: %s\n%s", problem.c_str(), kUsage);
  exit(2);
}

int parseArch(const std::string& text) {
  std::string digits = text;
  for (const char* prefix : {"sm_", "sm"})
    if (digits.rfind(prefix, 0) == 0) digits = digits.substr(strlen(prefix));
  char* end = nullptr;
  long sm = strtol(digits.c_str(), &end, 10);
  if (digits.empty() || *end || sm < 30 || sm > 200) usage("--assume-gpu " + text + ": expected an SM architecture such as sm80 or sm90");
  return static_cast<int>(sm);
}

double parseSpeedMbps(const std::string& text) {
  char* end = nullptr;
  double v = strtod(text.c_str(), &end);
  std::string unit = end ? end : "";
  double mbps = -1;
  if (unit == "G" || unit == "g" || unit == "Gb" || unit == "Gbps") mbps = v * 1000;
  else if (unit == "M" || unit == "Mb" || unit == "") mbps = v;
  if (text.empty() || !(mbps > 0) || mbps > 1e8) usage("--assume-nic " + text + ": expected a speed such as 200G or 100000 (Mb/s)");
  return mbps;
}

bool render(const std::string& dotText, const std::string& format, const std::string& output) {
  char dotFile[] = "/tmp/braid-topo-XXXXXX";
  int fd = mkstemp(dotFile);
  if (fd < 0) return false;
  bool ok = write(fd, dotText.data(), dotText.size()) == static_cast<ssize_t>(dotText.size());
  close(fd);
  pid_t pid = ok ? fork() : -1;
  if (pid == 0) {
    std::string fmt = "-T" + format;
    execlp("dot", "dot", fmt.c_str(), "-o", output.c_str(), dotFile, static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  if (pid > 0) waitpid(pid, &status, 0);
  unlink(dotFile);
  if (pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 127) {
    fprintf(stderr, "braid-topo: Graphviz's dot is not installed (Debian: apt-get install graphviz); use --dot\n");
    return false;
  }
  return pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace braid::topo;
  setenv("NCCL_DEBUG", "WARN", 0);  // a tool shows its warnings unless told otherwise
  braid::core::initOnce();
  TopologyRequest request;
  std::string dotOut, svgOut, pngOut;
  try {
    request = TopologyRequest::fromParams();
  } catch (const std::exception& e) {
    fprintf(stderr, "braid-topo: %s\n", e.what());
    return 1;
  }
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(a + " needs a value");
      return argv[++i];
    };
    if (a == "--topo-file") request.topoFile = value();
    else if (a == "--assume-gpu") request.build.assumeGpuSm = parseArch(value());
    else if (a == "--assume-nic") request.build.assumeNicMbps = parseSpeedMbps(value());
    else if (a == "--nodes") {
      std::string v = value();
      request.nodes = atoi(v.c_str());
      if (request.nodes < 1 || request.nodes > 4096) usage("--nodes " + v + ": expected 1..4096");
    } else if (a == "--no-detect") request.detect = false;
    else if (a == "--dot") dotOut = value();
    else if (a == "--svg") svgOut = value();
    else if (a == "--png") pngOut = value();
    else if (a == "-h" || a == "--help") {
      printf("%s", kUsage);
      return 0;
    } else usage("unknown argument " + a);
  }
  try {
    auto t = loadTopology(request);
    std::string title = "Braid topology: " + t->source;
    printf("%s (%d GPUs, %d network ports, %d NUMA nodes)\n\n", title.c_str(), t->system.count(NodeType::Gpu),
           t->system.count(NodeType::Net), t->system.count(NodeType::Cpu));
    for (const std::string& note : t->system.notes) printf("note: %s\n", note.c_str());
    printf("Nodes and links (GB/s):\n%s\n%s\n%s\n", t->system.describe().c_str(), describePaths(*t->paths).c_str(),
           describeDecisions(*t).c_str());
    printf("Rings%s:\n%s\n", request.nodes > 1 ? " (across machines)" : "", describeGraph(t->ring).c_str());
    printf("Trees%s:\n%s", request.nodes > 1 ? " (across machines)" : "", describeGraph(t->tree).c_str());
    std::string dot = toDot(t->system, title);
    if (!dotOut.empty()) {
      std::ofstream(dotOut) << dot;
      printf("\nDOT written to %s\n", dotOut.c_str());
    }
    bool ok = true;
    if (!svgOut.empty()) ok &= render(dot, "svg", svgOut) && printf("SVG written to %s\n", svgOut.c_str());
    if (!pngOut.empty()) ok &= render(dot, "png", pngOut) && printf("PNG written to %s\n", pngOut.c_str());
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    fprintf(stderr, "braid-topo: %s\n", e.what());
    return 1;
  }
}
