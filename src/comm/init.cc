#include "comm/init.h"

#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <set>

#include "bootstrap/root.h"
#include "braid_config.h"
#include "core/log.h"
#include "core/params.h"
#include "core/process.h"
#include "runtime/device.h"
#include "datapath/data_path.h"
#include "topology/pci_path.h"
#include "topology/topology.h"
#include "transport/shm/shm_transport.h"
#include <cstdio>

namespace braid::comm {

InitSettings InitSettings::fromParams() { return fromParams(params::process()); }

InitSettings InitSettings::fromParams(params::Store& p) {
  InitSettings s;
  s.net.interface.ifname = p.string("NCCL_SOCKET_IFNAME");
  s.net.interface.family = p.string("NCCL_SOCKET_FAMILY");
  const int64_t timeout = p.integer("BRAID_BOOTSTRAP_TIMEOUT");
  // (at most about 31 years: a deadline of now + the timeout must not overflow the clock)
  constexpr int64_t kMaxTimeout = 1000000000;
  s.net.timeout = std::chrono::seconds(timeout > 0 ? std::min(timeout, kMaxTimeout) : 300);
  if ((timeout <= 0 || timeout > kMaxTimeout) && p.firstWarning("BRAID_BOOTSTRAP_TIMEOUT")) {
    BRAID_WARN("BRAID_BOOTSTRAP_TIMEOUT=%lld must be 1..%lld seconds; using %lld", static_cast<long long>(timeout),
               static_cast<long long>(kMaxTimeout), static_cast<long long>(s.net.timeout.count()));
  }
  s.commIdEnv = p.string("NCCL_COMM_ID");
  s.commSecret = p.string("BRAID_COMM_SECRET");
  s.hostId = p.string("NCCL_HOSTID");
  s.defaultBlocking = p.integer("NCCL_COMM_BLOCKING") != 0;
  s.backend = p.string("BRAID_BACKEND");
  return s;
}

ncclUniqueId makeUniqueId(const InitSettings& settings, uint64_t* rootTicket) {
  if (rootTicket != nullptr) *rootTicket = 0;
  bootstrap::UniqueId id;
  if (!settings.commIdEnv.empty()) {
    id.root = net::SocketAddress::parse(settings.commIdEnv);
    id.secret = bootstrap::secretForAddress(settings.commIdEnv);
    id.rootStartedByRank0 = true;
    return id.encode();
  }
  const net::Interface iface = net::chooseInterface(settings.net.interface);
  net::Socket listening = net::Socket::listen(iface.address);
  id.root = listening.localAddress();
  id.secret = process::random64();
  BRAID_INFO(log::kBootstrap | log::kInit, "bootstrap: root listening on %s (interface %s)",
             id.root.toString().c_str(), iface.name.c_str());
  const uint64_t ticket = bootstrap::startRoot(std::move(listening),
                                               bootstrap::keyedSecret(id.secret, settings.commSecret),
                                               settings.net.timeout);
  if (rootTicket != nullptr) *rootTicket = ticket;
  return id.encode();
}

void checkInitArguments(int nRanks, int rank) {
  if (nRanks < 1) fail(ncclInvalidArgument, "nranks is %d; it must be at least 1", nRanks);
  if (nRanks > bootstrap::kMaxRanks) {
    fail(ncclInvalidArgument, "nranks is %d; Braid's communicators have at most %d ranks", nRanks, bootstrap::kMaxRanks);
  }
  if (rank < 0 || rank >= nRanks) {
    fail(ncclInvalidArgument, "rank is %d; it must be between 0 and nranks-1 = %d", rank, nRanks - 1);
  }
}

int deviceOfNewRank(const InitSettings& settings, int requested) {
  if (settings.backend == "host") return -1;
  const int current = runtime::currentCudaDevice();
  if (current < 0) return -1;
  return requested >= 0 ? requested : current;
}

std::unique_ptr<ncclComm> newCommunicator(int rank, int nRanks, const CommConfig& config, int cudaDevice) {
  RankIdentity identity;
  identity.rank = rank;
  identity.nRanks = nRanks;
  identity.cudaDevice = cudaDevice;
  return std::make_unique<ncclComm>(identity, config);
}

namespace {
TestDeviceFactory& testDeviceFactory() {
  static TestDeviceFactory* factory = new TestDeviceFactory();  // never destroyed (exit may race a rank)
  return *factory;
}
}  // namespace

void setTestDeviceFactory(TestDeviceFactory factory) { testDeviceFactory() = std::move(factory); }

namespace {

/// BRAID_BACKEND against the device the rank was created on (-1: none usable).
Backend chooseBackend(const std::string& requested, int cudaDevice) {
  if (requested == "host") return Backend::kHost;
  if (requested.empty() || requested == "auto") return cudaDevice >= 0 ? Backend::kCuda : Backend::kHost;
  if (requested == "cuda") {
    if (cudaDevice >= 0) return Backend::kCuda;
    const char* why = "";
    runtime::currentCudaDevice(&why);
    fail(ncclInvalidUsage, "BRAID_BACKEND=cuda, but no CUDA device is usable here: %s", why);
  }
  fail(ncclInvalidArgument, "BRAID_BACKEND is '%s'; expected auto, host or cuda", requested.c_str());
}

}  // namespace

namespace {

// The topology is computed when a user asks to see it (a dump file on this rank, GRAPH logging
// on rank 0) or supplies one (NCCL_TOPO_FILE, NCCL_GRAPH_FILE, checked on every rank so a bad
// file fails init with its line), and whenever the communicator spans machines: its graphs
// choose the network port of each channel (topo::PortPlan). Collectives still run their rings
// in rank order.
topo::PortPlan planTopology(const RankIdentity& identity, const std::vector<PeerInfo>& peers) {
  auto& store = params::process();
  topo::TopologyRequest request = topo::TopologyRequest::fromParams();
  const bool dumpTopo = !request.topoDumpFile.empty() && store.integer("NCCL_TOPO_DUMP_FILE_RANK") == identity.rank;
  const bool dumpGraph = !request.graphDumpFile.empty() && store.integer("NCCL_GRAPH_DUMP_FILE_RANK") == identity.rank;
  const bool logIt = identity.rank == 0 && log::enabled(log::Level::Info, log::kGraph);
  const bool given = !request.topoFile.empty() || !request.graphFile.empty();
  std::set<uint64_t> hosts;
  for (const PeerInfo& p : peers) hosts.insert(p.hostHash);
  request.nodes = static_cast<int>(hosts.size());
  const bool acrossMachines = request.nodes > 1;
  if (!dumpTopo && !dumpGraph && !logIt && !given && !acrossMachines) return {};
  if (!dumpTopo) request.topoDumpFile.clear();
  if (!dumpGraph) request.graphDumpFile.clear();
  std::unique_ptr<topo::Topology> topology;
  try {
    topology = topo::loadTopology(request);
  } catch (const std::exception& e) {
    if (given || dumpTopo || dumpGraph) throw;  // (what the user asked for fails init)
    BRAID_WARN("rank %d: the topology could not be detected (%s); network ports are chosen by number", identity.rank,
               e.what());
    return {};
  }
  if (identity.rank == 0) topo::logTopology(*topology);
  if (!acrossMachines) return {};
  const PeerInfo& mine = peers[identity.rank];
  const std::string busId = mine.busId >= 0 ? topo::busIdText(mine.busId) : "";
  topo::PortPlan plan = topo::planPorts(*topology, busId, identity.cudaDevice);
  auto list = [](const std::vector<std::string>& ports) {
    std::string text;
    for (const std::string& p : ports) text += (text.empty() ? "" : " ") + p;
    return text.empty() ? std::string("by number") : text;
  };
  if (plan.ringIn.empty() && plan.tree.empty() && plan.near.empty()) {
    BRAID_INFO(log::kNet | log::kGraph, "rank %d: the topology places no network port (no GPU in it, or ports "
               "without names): ports by number", identity.rank);
  } else {
    BRAID_INFO(log::kNet | log::kGraph, "rank %d: network ports from the topology: rings in %s, out %s; trees %s; "
               "send/recv %s", identity.rank, list(plan.ringIn).c_str(), list(plan.ringOut).c_str(),
               list(plan.tree).c_str(), list(plan.near).c_str());
  }
  return plan;
}

/// Whether an MPS control daemon serves this process's GPUs: its control pipe exists where
/// CUDA looks for it (CUDA_MPS_PIPE_DIRECTORY, else /tmp/nvidia-mps). CUDA's own variable, read
/// as CUDA reads it (not one of NCCL's knobs).
bool mpsRunning(std::string* where) {
  const char* dir = std::getenv("CUDA_MPS_PIPE_DIRECTORY");
  *where = std::string(dir != nullptr && dir[0] != '\0' ? dir : "/tmp/nvidia-mps") + "/control";
  struct stat st {};
  return stat(where->c_str(), &st) == 0 && S_ISFIFO(st.st_mode);
}

/// Several ranks on one GPU: said at INFO, with a warning (once per process) for each way they
/// run badly or not at all (gpuSharing). Time-sliced ranks are not refused: the gpu suite's
/// process tests run so.
void reportSharedDevice(const RankIdentity& identity, const std::vector<PeerInfo>& peers) {
  std::string pipe;
  const bool mps = mpsRunning(&pipe);
  const int queues = deviceConnections(std::getenv("CUDA_DEVICE_MAX_CONNECTIONS"));
  const GpuSharing s = gpuSharing(peers, identity.rank, mps, queues);
  if (s.inProcess + s.otherProcesses == 0) return;
  BRAID_INFO(log::kInit, "rank %d shares CUDA device %d with %d other rank(s) of this process and %d of other processes%s",
             identity.rank, identity.cudaDevice, s.inProcess, s.otherProcesses,
             s.otherProcesses > 0 && mps ? " (served by MPS)" : "");
  static std::atomic<bool> warnedProcesses{false}, warnedQueues{false};
  if (s.timeSliced && !warnedProcesses.exchange(true)) {
    BRAID_WARN("ranks of several processes share CUDA device %d and no MPS daemon serves it (no control pipe at %s): "
               "their kernels take turns on the GPU, so every collective is slow; start MPS "
               "(nvidia-cuda-mps-control -d) or run those ranks as threads of one process", identity.cudaDevice,
               pipe.c_str());
  }
  if (s.tooFewQueues && !warnedQueues.exchange(true)) {
    BRAID_WARN("%d ranks of this process share CUDA device %d but CUDA gives its streams %d hardware queues "
               "(CUDA_DEVICE_MAX_CONNECTIONS): a rank's kernel may queue behind another's that waits for it and hang; "
               "set CUDA_DEVICE_MAX_CONNECTIONS=%d or more before CUDA starts", s.inProcess + 1, identity.cudaDevice, queues,
               s.queuesNeeded);
  }
}

}  // namespace

void initRank(Communicator& comm, const ncclUniqueId& uniqueId, const InitSettings& settings) {
  initRank(comm, std::vector<ncclUniqueId>{uniqueId}, settings);
}

void initRank(Communicator& comm, const std::vector<ncclUniqueId>& uniqueIds, const InitSettings& settings) {
  const auto start = std::chrono::steady_clock::now();
  RankIdentity identity = comm.identity();
  identity.backend = chooseBackend(settings.backend, identity.cudaDevice);
  if (testDeviceFactory()) {  // (tests: the device path on the CPU)
    identity.backend = Backend::kCuda;
    identity.cudaDevice = 0;
  }
  if (identity.backend == Backend::kHost) identity.cudaDevice = -1;
  std::vector<bootstrap::UniqueId> ids;
  for (const ncclUniqueId& u : uniqueIds) {
    ids.push_back(bootstrap::UniqueId::decode(u));
    ids.back().secret = bootstrap::keyedSecret(ids.back().secret, settings.commSecret);
  }
  const bool oneRoot = std::all_of(ids.begin(), ids.end(), [&](const bootstrap::UniqueId& u) {
    return u.root.toString() == ids[0].root.toString() && u.secret == ids[0].secret;
  });
  if (oneRoot) ids.resize(1);  // (NCCL_COMM_ID gives every id the same root)
  bootstrap::UniqueId& id = ids[0];

  // With NCCL_COMM_ID nobody has started the root: rank 0 does, at the named address.
  if (id.rootStartedByRank0) {
    if (identity.rank == 0) {
      net::SocketAddress bindAt = id.root;
      bootstrap::startRoot(net::Socket::listen(bindAt), id.secret, settings.net.timeout);
    }
    if (settings.commSecret.empty()) {
      BRAID_INFO(log::kInit | log::kBootstrap, "rank %d: NCCL_COMM_ID makes the unique id public: whoever reaches %s "
                 "may join this job (as with NCCL, the network is its only protection); set the same "
                 "BRAID_COMM_SECRET on every rank to require a passphrase", identity.rank, id.root.toString().c_str());
    }
  }

  transport::shm::removeOrphans();  // (segments of ranks killed during an earlier setup)
  auto channel = bootstrap::Bootstrap::join(ids, identity.rank, identity.nRanks, settings.net, &comm.abortFlag());
  const auto bootstrapDone = std::chrono::steady_clock::now();

  std::vector<PeerInfo> peers(identity.nRanks);
  PeerInfo& mine = peers[identity.rank];
  std::memset(&mine, 0, sizeof(mine));
  mine.rank = identity.rank;
  mine.abiVersion = NCCL_VERSION_CODE;
  std::strncpy(mine.braidVersion, BRAID_VERSION, sizeof(mine.braidVersion) - 1);
  mine.hostHash = hashString(hostIdentity(settings.hostId));
  mine.pid = static_cast<int32_t>(getpid());
  mine.processId = process::randomId();
  mine.pidNamespace = process::pidNamespace();
  const process::FileIdentity shm = process::sharedMemoryDirectory();
  mine.shmDevice = shm.device;
  mine.shmInode = shm.inode;
  mine.cudaDevice = identity.cudaDevice;
  mine.busId = identity.cudaDevice >= 0 ? runtime::cudaBusId(identity.cudaDevice) : -1;
  mine.backend = identity.backend;
  cpu_set_t affinity;
  mine.cpus = sched_getaffinity(0, sizeof(affinity), &affinity) == 0 ? CPU_COUNT(&affinity) : 0;
  channel->allGather(peers.data(), sizeof(PeerInfo));
  checkPeers(peers);
  localPosition(peers, identity.rank, &identity.localRank, &identity.localRanks);
  identity.commHash = channel->commId();  // (random: reveals nothing of the secret)

  const topo::PortPlan ports = planTopology(identity, peers);

  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double boot = std::chrono::duration<double>(bootstrapDone - start).count();
  const bool onDevice = identity.backend == Backend::kCuda;
  auto dataSettings = datapath::DataPathSettings::fromParams(comm.config(), onDevice);
  dataSettings.connector.ports = ports;
  std::unique_ptr<runtime::Device> device;
  if (onDevice) {
    const int threads = dataSettings.limits.shape.threads;
    device = testDeviceFactory() ? testDeviceFactory()(threads) : runtime::openCudaDevice(identity.cudaDevice, threads);
    comm.mirrorAbortTo(device->abortWord());
    reportSharedDevice(identity, peers);
  }
  auto dataPath = std::make_unique<datapath::DataPath>(
      *channel, identity.rank, peers, dataSettings, comm.abortWord(), identity.commHash,
      [&comm](ncclResult_t code) {
        comm.setAsyncError(code);
        comm.requestAbort();
      },
      std::move(device));
  comm.completeInit(std::move(channel), identity, std::move(dataPath));
  BRAID_INFO(log::kInit, "comm %p rank %d nranks %d cudaDev %d nvmlDev %d busId %lx commId %#llx localRank %d "
                         "localRanks %d backend %s - Init COMPLETE",
             static_cast<void*>(&comm), identity.rank, identity.nRanks, identity.cudaDevice, identity.cudaDevice,
             static_cast<long>(mine.busId < 0 ? 0 : mine.busId), static_cast<unsigned long long>(identity.commHash),
             identity.localRank, identity.localRanks, backendName(identity.backend));
  BRAID_INFO(log::kInit, "Init timings: rank %d nranks %d total %.3f s (bootstrap %.3f, peer exchange %.3f)",
             identity.rank, identity.nRanks, total, boot, total - boot);
}

}  // namespace braid::comm
