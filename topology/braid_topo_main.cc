// braid-topo: shows the machine as Braid sees it — nodes and links, the path matrix, the
// P2P/GDR decisions and the ring and tree channels — and draws it with Graphviz; with
// --tuning, what the tuner would choose for each collective and size instead.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "core/init.h"
#include "core/params.h"
#include "core/status.h"
#include "plan/planner.h"
#include "plugin/net_plugin.h"
#include "topology/topology.h"
#include "topology/tuner.h"

namespace {

const char* const kUsage =
    "usage: braid-topo [--topo-file F] [--assume-gpu smNN] [--assume-nic SPEED] [--nodes N]\n"
    "                  [--no-detect] [--dot F] [--svg F | --png F]\n"
    "       braid-topo --tuning [--backend gpu|host] [--ranks N] [--nodes N] [--topo-file F] ...\n"
    "  --topo-file F     read NCCL topology XML F (default: NCCL_TOPO_FILE, else detect this machine)\n"
    "  --assume-gpu ARCH PCI devices of class 0x03 without <gpu> are GPUs of ARCH (sm80, sm90, 90)\n"
    "  --assume-nic SPEED PCI devices of class 0x02 without <nic> are ports of SPEED (200G, 400G, 25000 Mb/s)\n"
    "  --nodes N         search channels for N machines like this one (adds network ports)\n"
    "  --no-detect       use the file alone (no completion from this machine)\n"
    "  --dot F           write the graph in Graphviz DOT\n"
    "  --svg F, --png F  render it with Graphviz's dot (Debian: apt-get install graphviz)\n"
    "  --tuning          per collective and size (8 B to 16 GiB), the tuner's algorithm, protocol, channels,\n"
    "                    predicted time and bus bandwidth, and each algorithm's best bus bandwidth\n"
    "  --backend B       the cost table: gpu (default when the topology has GPUs: one rank per GPU, the\n"
    "                    ring channels found) or host (the host backend: --ranks ranks per machine)\n"
    "  --ranks N         host backend: ranks per machine (default: its CPUs)\n"
    "Honours NCCL_TOPO_FILE, NCCL_TOPO_DUMP_FILE, NCCL_GRAPH_FILE, NCCL_GRAPH_DUMP_FILE, NCCL_P2P_LEVEL,\n"
    "NCCL_P2P_DISABLE, NCCL_NET_GDR_LEVEL, NCCL_CROSS_NIC, NCCL_SHM_DISABLE, NCCL_NET_PLUGIN and NCCL_NET\n"
    "(a net plugin's devices are the detected network ports) as the library does, and for\n"
    "--tuning NCCL_ALGO, NCCL_PROTO, NCCL_MIN_NCHANNELS, NCCL_MAX_NCHANNELS, NCCL_NTHREADS.\n";

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

std::string sizeText(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  while (u < 3 && bytes >= 1024 && bytes % 1024 == 0) {
    bytes /= 1024;
    ++u;
  }
  return std::to_string(bytes) + " " + units[u];
}

/// nccl-tests' bus bandwidth (GB/s) of `bytes` in `us`.
double busBandwidth(braid::kernels::Func f, int n, uint64_t bytes, double us) {
  return us > 0 ? static_cast<double>(bytes) * braid::topo::busFactor(f, n) / (1000.0 * us) : 0;
}

/// The --tuning tables: per collective, the choice at each size and every algorithm's best.
int printTuning(const braid::topo::Tuner& tuner, const braid::plan::AlgoProtoMask& mask) {
  using namespace braid;
  using kernels::Algo;
  using kernels::Func;
  printf("%s\n", tuner.describe().c_str());
  const int n = tuner.shape().nRanks;
  for (int fi = 0; fi < topo::kTunerFuncs; ++fi) {
    const Func f = static_cast<Func>(fi);
    const plan::EnvFunc ef = plan::envFuncOf(f);
    const uint32_t algos = plan::tunerAlgos(mask.algos[static_cast<int>(ef)]);
    const uint32_t protos = mask.protos[static_cast<int>(ef)];
    const uint32_t forced = protos == plan::AlgoProtoMask::all().protos[static_cast<int>(ef)] ? 0 : protos;
    printf("\n%s on %d ranks\n%10s  %-16s %-7s %3s %12s %12s", topo::funcName(f), n, "size", "algorithm", "proto",
           "ch", "time (us)", "busbw GB/s");
    std::vector<Algo> serving;
    for (int ai = 0; ai < topo::kTunerAlgos; ++ai) {
      const Algo a = static_cast<Algo>(ai);
      if (!(algos & (1u << ai))) continue;
      bool any = false;
      for (int pi = 0; pi < topo::kTunerProtos; ++pi) any = any || topo::Tuner::implemented(f, a, static_cast<kernels::Proto>(pi));
      if (!any) continue;
      serving.push_back(a);
      printf(" %16s", topo::algoName(a));
    }
    printf("\n");
    for (uint64_t bytes = 8; bytes <= (uint64_t(16) << 30); bytes *= 2) {
      topo::Choice c;
      if (!tuner.choose(f, bytes, algos, protos, forced, &c)) {
        printf("%10s  (NCCL_ALGO/NCCL_PROTO leave no candidate)\n", sizeText(bytes).c_str());
        continue;
      }
      printf("%10s  %-16s %-7s %3d %12.2f %12.3f", sizeText(bytes).c_str(), topo::algoName(c.algo), topo::protoName(c.proto),
             c.nChannels, c.timeUs, busBandwidth(f, n, bytes, c.timeUs));
      for (Algo a : serving) {
        topo::Choice best;
        if (tuner.choose(f, bytes, 1u << static_cast<int>(a), protos, forced, &best)) {
          printf(" %16.3f", busBandwidth(f, n, bytes, best.timeUs));
        } else {
          printf(" %16s", "-");
        }
      }
      printf("\n");
    }
  }
  return 0;
}

/// The net plugin whose devices detection made the network ports, when there is one.
void printNetPlugin() {
  const auto plugin = braid::plugin::NetSession::probe(braid::params::process().string("NCCL_NET"));
  if (!plugin || plugin->devices.empty()) return;
  printf("Network ports from net plugin %s (v%d, %s):\n", plugin->name.c_str(), plugin->version, plugin->path.c_str());
  for (size_t d = 0; d < plugin->devices.size(); ++d) {
    const braid::plugin::NetDeviceProperties& p = plugin->devices[d];
    printf("  NET/%zu %s: %d Mb/s, port %d, guid 0x%llx, ptrSupport 0x%x, %s\n", d, p.name.c_str(), p.speedMbps,
           p.port, static_cast<unsigned long long>(p.guid), static_cast<unsigned>(p.ptrSupport),
           p.pciPath.empty() ? "no PCI path (under the CPU)" : p.pciPath.c_str());
  }
  printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace braid::topo;
  setenv("NCCL_DEBUG", "WARN", 0);  // a tool shows its warnings unless told otherwise
  braid::core::initOnce();
  TopologyRequest request;
  std::string dotOut, svgOut, pngOut, backend;
  bool tuning = false;
  int ranks = 0;
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
    else if (a == "--assume-gpu") request.assume.gpuSm = parseArch(value());
    else if (a == "--assume-nic") request.assume.nicMbps = parseSpeedMbps(value());
    else if (a == "--nodes") {
      std::string v = value();
      request.nodes = atoi(v.c_str());
      if (request.nodes < 1 || request.nodes > 4096) usage("--nodes " + v + ": expected 1..4096");
    } else if (a == "--no-detect") request.detect = false;
    else if (a == "--tuning") tuning = true;
    else if (a == "--backend") {
      backend = value();
      if (backend != "gpu" && backend != "host") usage("--backend " + backend + ": expected gpu or host");
    } else if (a == "--ranks") {
      std::string v = value();
      ranks = atoi(v.c_str());
      if (ranks < 1 || ranks > 4096) usage("--ranks " + v + ": expected 1..4096");
    }
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
    if (tuning) {
      auto& store = braid::params::process();
      const braid::plan::AlgoProtoMask mask = braid::plan::parseAlgoProto(store.string("NCCL_ALGO"), store.string("NCCL_PROTO"));
      const int gpus = t->system.count(NodeType::Gpu);
      if (backend.empty()) backend = gpus > 0 ? "gpu" : "host";
      if (backend == "gpu" && gpus == 0) usage("--backend gpu: the topology has no GPUs (try --assume-gpu or --backend host)");
      CostShape shape;
      const CostTable* table = &kHostCostTable;
      if (backend == "gpu") {
        shape = gpuShape(t->ring, gpus, request.nodes);
        table = &kGpuCostTable;
      } else {
        const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        shape.ranksPerNode = ranks > 0 ? ranks : static_cast<int>(cpus);
        shape.nNodes = request.nodes;
        shape.nRanks = shape.ranksPerNode * shape.nNodes;
        shape.cpusPerNode = static_cast<int>(cpus);
        shape.maxChannels = 2;
      }
      const int64_t minC = store.integer("NCCL_MIN_NCHANNELS"), maxC = store.integer("NCCL_MAX_NCHANNELS");
      const int64_t threads = store.integer("NCCL_NTHREADS");
      if (maxC > 0) shape.maxChannels = static_cast<int>(std::min<int64_t>(maxC, 64));
      if (minC > 0) shape.minChannels = static_cast<int>(std::min<int64_t>(minC, 64));
      if (shape.minChannels > shape.maxChannels) shape.maxChannels = shape.minChannels;
      if (threads >= 64 && threads <= 512 && threads % 64 == 0) shape.threads = static_cast<int>(threads);
      printf("Braid tuning: %s\n", t->source.c_str());
      return printTuning(Tuner(*table, shape), mask);
    }
    std::string title = "Braid topology: " + t->source;
    printf("%s (%d GPUs, %d network ports, %d NUMA nodes)\n\n", title.c_str(), t->system.count(NodeType::Gpu),
           t->system.count(NodeType::Net), t->system.count(NodeType::Cpu));
    for (const std::string& note : t->system.notes) printf("note: %s\n", note.c_str());
    if (request.detect && request.topoFile.empty()) printNetPlugin();
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
