#include "datapath/data_path.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <optional>

#include "bootstrap/bootstrap.h"
#include "comm/registrations.h"
#include "core/log.h"
#include "core/params.h"
#include "core/process.h"
#include "core/status.h"
#include "plugin/profiler_plugin.h"
#include "plugin/tuner_plugin.h"
#include "proxy/control_events.h"
#include "proxy/op_trace.h"
#include "proxy/proxy.h"
#include "kernels/algorithms/send_recv.h"
#include "runtime/host/kernel_table.h"
#include "datapath/profile_events.h"
#include "datapath/signature.h"
#include "transport/shm/shm_transport.h"

namespace braid::datapath {

using runtime::host::HostCollectiveFn;
using runtime::host::kCopyFunction;
using runtime::host::kOnlyFuncs;
using runtime::host::kReductionTable;

namespace {
static_assert(transport::kSetChannels == kMaxChannels, "a connection set for every channel");

std::vector<transport::PeerPlace> placesOf(const std::vector<PeerInfo>& peers, int rank, runtime::Device* device) {
  std::vector<transport::PeerPlace> places;
  const PeerInfo& mine = peers[rank];
  std::vector<int> apart;  // processes of this host that cannot share /dev/shm with this rank
  for (const PeerInfo& p : peers) {
    const bool sameHost = p.hostHash == mine.hostHash;
    const bool inProcess = sameProcess(p, mine);
    const bool shared = !inProcess && shareMemory(p, mine);
    const bool gpuReachable = device != nullptr && sameHost && !inProcess && device->reachableFrom(p.busId);
    places.push_back({sameHost, inProcess, shared, gpuReachable,
                      transport::shm::segmentPrefix(p.pid, p.pidNamespace, p.processId)});
    if (sameHost && !inProcess && !shared) apart.push_back(p.rank);
  }
  if (!apart.empty()) {
    std::string list;
    for (int r : apart) list += (list.empty() ? "" : ", ") + std::to_string(r);
    BRAID_INFO(log::kInit | log::kShm, "rank %d: rank(s) %s run on this host but see another /dev/shm (another "
               "container?): no shared memory with them, connections go through the network transport", rank,
               list.c_str());
  }
  return places;
}
/// Other processes of this host whose pids name them here (the same pid namespace): their exit
/// is visible, watched from now on. Those of other namespaces (containers) are noticed by their
/// connections and NCCL_TIMEOUT, as ranks on other hosts are.
std::vector<PeerProcess> watchedPeers(const std::vector<PeerInfo>& peers, int rank) {
  const PeerInfo& mine = peers[rank];
  std::vector<PeerProcess> watched;
  std::string apart;
  for (const PeerInfo& p : peers) {
    if (p.hostHash != mine.hostHash || sameProcess(p, mine)) continue;
    if (samePidNamespace(p, mine)) {
      watched.push_back({p.rank, process::ProcessWatch(p.pid)});
    } else {
      apart += (apart.empty() ? "" : ", ") + std::to_string(p.rank);
    }
  }
  if (!apart.empty()) {
    BRAID_INFO(log::kInit, "rank %d: rank(s) %s run on this host in another pid namespace: their pids do not name "
               "them here, so their exit is noticed through their connections (or NCCL_TIMEOUT)", rank, apart.c_str());
  }
  return watched;
}

transport::ConnectorOptions optionsFor(const DataPathSettings& s, uint64_t commHash, const uint32_t* abortFlag,
                                       runtime::Device* device, int64_t busId, int nRanks) {
  transport::ConnectorOptions o = s.connector;
  o.p2p.simpleStepBytes = peerSimpleStepBytes(o.ring.simpleStepBytes, nRanks, device != nullptr);
  o.commHash = commHash;
  o.abortFlag = abortFlag;
  o.allocator = device != nullptr ? device->fifoAllocator() : nullptr;
  o.gpuDirect.gpuBusId = busId;
  return o;
}
/// A tuner plugin's numPipeOps for the collectives of a group (plan::PluginInputs): how many
/// the group has, sends and receives aside, over the most channels one may use, rounded up.
int pipeOps(const std::vector<plan::Task>& tasks, const plan::PlanLimits& limits) {
  const long channels = std::max(1, limits.maxChannels);
  const long collectives = std::count_if(tasks.begin(), tasks.end(),
                                         [](const plan::Task& t) { return t.func != kernels::Func::kSendRecv; });
  return static_cast<int>(std::max(1L, (collectives + channels - 1) / channels));
}
}  // namespace

DataPath::DataPath(bootstrap::Bootstrap& channel, int rank, const std::vector<PeerInfo>& peers,
                   const DataPathSettings& settings, const uint32_t* abortWord,
                   uint64_t commHash, std::function<void(ncclResult_t)> onFailure,
                   std::unique_ptr<runtime::Device> device)
    : device_(std::move(device)),
      offered_(device_ != nullptr ? std::make_unique<OfferedBuffers>(*device_, rank) : nullptr),
      rank_(rank),
      nRanks_(static_cast<int>(peers.size())),
      settings_(settings),
      abort_(abortWord),
      connector_(channel, rank, placesOf(peers, rank, device_.get()), optionsFor(settings, commHash, abortWord, device_.get(), peers[rank].busId,
                                                                        static_cast<int>(peers.size()))),
      statuses_(device_ != nullptr ? device_->statuses() : hostStatuses_.data()),
      executor_(settings.threadsPerChannel) {
  for (const PeerInfo& p : peers) deviceOf_.push_back(p.cudaDevice);
  if (device_ != nullptr) {
    localDeviceRanks_ = 0;
    for (const PeerInfo& p : peers) {
      if (!sameProcess(p, peers[rank])) continue;
      if (p.cudaDevice == peers[rank].cudaDevice) {
        ++localDeviceRanks_;
      } else if (!settings.connector.p2pDisabled) {
        device_->reachDevice(p.cudaDevice);  // threads on other GPUs: FIFO slots in their memory
      }
    }
    capChannels(channel, peers, rank);
  }
  topo::CostShape& shape = settings_.limits.shape;
  shape.cpusPerNode = 0;  // (GPU kernels do not share the CPUs: never oversubscribed)
  for (const PeerInfo& p : peers) {
    hostOf_.push_back(p.hostHash);
    if (device_ == nullptr && p.cpus > 0 && (shape.cpusPerNode == 0 || p.cpus < shape.cpusPerNode)) shape.cpusPerNode = p.cpus;
  }
  setRanksPerNode(settings_.ranksPerNode);
  if (device_ == nullptr) {
    const int onThisHost = static_cast<int>(std::count_if(peers.begin(), peers.end(), [&](const PeerInfo& p) {
      return p.hostHash == peers[rank].hostHash;
    }));
    const int cpus = peers[rank].cpus;
    if (cpus > 0 && onThisHost * std::max(1, settings_.limits.shape.cpuThreadsPerChannel) > cpus) {
      kernels::setHostOversubscribed();  // (waits yield their core sooner: kernels/platform.h)
    }
  }
  const bool spansHosts =
      std::any_of(peers.begin(), peers.end(), [&](const PeerInfo& p) { return p.hostHash != peers[0].hostHash; });
  peerChannels_ = datapath::peerChannels(settings_, nRanks_, spansHosts, device_ != nullptr);
  BRAID_INFO(log::kInit | log::kP2p, "rank %d: sends and receives on up to %d channels, %d connection%s a peer", rank_,
             peerChannels_.total, peerChannels_.perPeer, peerChannels_.perPeer == 1 ? "" : "s");
  openTunerPlugin(commHash);
  profiler_ = openProfiler(commHash, settings_.commName, rank_, nodeOf_);
  if (profiler_ != nullptr) proxyControl_ = std::make_unique<proxy::ControlWatch>(profiler_.get());
  std::vector<PeerProcess> watched = watchedPeers(peers, rank);
  std::function<bool()> busy;
  if (device_ != nullptr) busy = [d = device_.get()] { return d->busy(); };
  watchdog_ = std::make_unique<Watchdog>(rank, nRanks_, commHash, std::move(watched), connector_, statuses_,
                                         kMaxChannels, std::move(onFailure), settings.watchdog, std::move(busy), &channel);
}

void DataPath::capChannels(bootstrap::Bootstrap& channel, const std::vector<PeerInfo>& peers, int rank) {
  int sharing = 0;  // ranks of any process on this rank's GPU, itself included
  for (const PeerInfo& p : peers) sharing += sameGpu(p, peers[rank]) ? 1 : 0;
  const int resident = device_->residentBlocks();
  constexpr int32_t kNoCap = std::numeric_limits<int32_t>::max();
  // Every rank must plan a collective on the same channels: the cap is the least any GPU of
  // the communicator allows its ranks (each rank knows only its own GPU's).
  std::vector<int32_t> caps(peers.size(), kNoCap);
  caps[rank] = resident > 0 && sharing > 0 ? std::max(1, resident / sharing) : kNoCap;
  channel.allGather(caps.data(), sizeof(int32_t));
  const auto least = std::min_element(caps.begin(), caps.end());
  if (*least == kNoCap) return;
  const int cap = std::max<int32_t>(1, *least);
  const int where = static_cast<int>(least - caps.begin());
  plan::PlanLimits& limits = settings_.limits;
  if (limits.minChannels > cap) {
    BRAID_WARN("rank %d: at least %d channels were asked for (NCCL_MIN_NCHANNELS or the config's minCTAs), but rank "
               "%d's GPU keeps only enough blocks resident for %d channels of each rank on it (this rank's: %d ranks "
               "on CUDA device %d, %d blocks): every rank gets %d, so that all of their blocks run together", rank,
               limits.minChannels, where, cap, sharing, device_->ordinal(), resident, cap);
    limits.minChannels = cap;
  }
  if (limits.maxChannels > cap) {
    BRAID_INFO(log::kInit | log::kTuning, "rank %d: at most %d channels (not %d): rank %d's GPU keeps enough blocks "
               "resident for that many of each rank on it (this rank's: %d ranks on CUDA device %d, %d blocks)", rank,
               cap, limits.maxChannels, where, sharing, device_->ordinal(), resident);
    limits.maxChannels = cap;
  }
}

void DataPath::openTunerPlugin(uint64_t commHash) {
  plugin::TunerCommInfo info;
  info.commId = commHash;
  info.rank = rank_;
  info.nRanks = nRanks_;
  std::map<int, int> perNode;  // Braid counts a node (host, or BRAID_RANKS_PER_NODE group) as an NVLink domain
  for (int node : nodeOf_) ++perNode[node];
  info.nNodes = info.nvlDomains = std::max<int>(1, static_cast<int>(perNode.size()));
  info.minRanksPerNvlDomain = nRanks_;
  info.maxRanksPerNvlDomain = 0;
  for (const auto& [node, n] : perNode) {
    info.minRanksPerNvlDomain = std::min(info.minRanksPerNvlDomain, n);
    info.maxRanksPerNvlDomain = std::max(info.maxRanksPerNvlDomain, n);
  }
  const topo::CostTable& table = *settings_.limits.table;
  plan::fillConstants(table, &info);
  const plugin::TunerCommInfo given = info;
  tunerPlugin_ = plugin::TunerSession::open(info);
  settings_.limits.tunerPlugin = tunerPlugin_.get();
  // A v5 plugin's changed latencies: this communicator's own copy of the table.
  auto tuned = std::make_unique<topo::CostTable>();
  if (tunerPlugin_ != nullptr && plan::applyConstants(table, given, info, rank_, tuned.get())) {
    pluginTable_ = std::move(tuned);
    settings_.limits.table = pluginTable_.get();
  }
}

DataPath::~DataPath() {
  if (device_ != nullptr) {
    try {  // the kernels use the connections' memory until they end
      synchronize();
    } catch (const Error& e) {
      BRAID_WARN("rank %d: %s", rank_, e.what());
    }
  }
  if (!departure_.empty()) watchdog_->depart(departure_);
}

void DataPath::setRanksPerNode(int k) {
  settings_.ranksPerNode = std::max(0, k);
  nodeOf_.clear();
  std::map<uint64_t, int> hostIndex;
  for (int r = 0; r < nRanks_; ++r) {
    nodeOf_.push_back(k > 0 ? r / k : hostIndex.emplace(hostOf_[r], static_cast<int>(hostIndex.size())).first->second);
  }
  trees_.clear();  // (before any Tree or Hier2D collective: their connections stay where they were made)
  forgetChoices();
  gridSets_.clear();
  describeShape();
}

void DataPath::describeShape() {
  topo::CostShape& shape = settings_.limits.shape;
  std::map<int, int> perNode;
  for (int node : nodeOf_) ++perNode[node];
  shape.nNodes = static_cast<int>(perNode.size());
  shape.ranksPerNode = 0;
  for (const auto& [node, n] : perNode) shape.ranksPerNode = std::max(shape.ranksPerNode, n);
  std::map<uint64_t, int> perHost;  // the CPUs are the host's, however many nodes it counts as
  for (uint64_t h : hostOf_) ++perHost[h];
  shape.ranksPerCpuSet = 0;
  for (const auto& [host, n] : perHost) shape.ranksPerCpuSet = std::max(shape.ranksPerCpuSet, n);
  const transport::ConnectorOptions& o = settings_.connector;
  shape.intra = o.shmDisabled && o.p2pDisabled ? topo::LinkClass::kNetwork : topo::LinkClass::kMemory;
  const bool oneHost = perHost.size() == 1;
  // BRAID_RANKS_PER_NODE groups on one host still talk through the same transports.
  shape.inter = settings_.ranksPerNode > 0 && oneHost ? shape.intra : topo::LinkClass::kNetwork;
  shape.directMaxBytes = uint64_t(o.p2p.llStepLines) * 8;  // Direct's message is one LL step of a peer connection
  if (rank_ == 0 && log::enabled(log::Level::Info, log::kTuning)) {
    const std::string text = plan::tunerFor(nRanks_, settings_.limits).describe();
    size_t start = 0;
    while (start < text.size()) {
      const size_t end = std::min(text.find('\n', start), text.size());
      BRAID_INFO(log::kTuning, "%s", text.substr(start, end - start).c_str());
      start = end + 1;
    }
  }
}

void DataPath::rethrowWithReason(const char* call, uint64_t seq) {
  ncclResult_t code;
  std::string text;
  if (watchdog_->failure(&code, &text)) throw Error(code, text);
  const int peer = connector_.setupTimedOutOn();
  if (peer < 0) throw;
  try {
    throw;
  } catch (const Error& e) {
    const std::string what = seq != 0 ? std::string(call) + " #" + std::to_string(seq) : call;
    fail(e.code(), "rank %d has not called %s of communicator %#llx: rank %d waited %lld s (BRAID_BOOTSTRAP_TIMEOUT) for it "
         "to make their connection. Do all ranks make the same calls in the same order? (%s)", peer, what.c_str(),
         static_cast<unsigned long long>(connector_.options().commHash), rank_, static_cast<long long>(connector_.setupTimeoutSeconds()),
         e.what());
  }
}

void DataPath::failAborted(const char* what) {
  watchdog_->checkMismatch();
  ncclResult_t code;
  std::string text;
  if (watchdog_->failure(&code, &text)) throw Error(code, text);
  fail(ncclInvalidUsage, "rank %d: the communicator was aborted during %s", rank_, what);
}

void DataPath::execute(const std::vector<plan::Task>& tasks, void* groupApiEvent) {
  RelaxedCapture relaxed(device_.get());
  std::optional<GroupProfile> profile;  // (only with a profiler plugin)
  if (profiler_ != nullptr) {
    profile.emplace(*profiler_, groupApiEvent, device_ != nullptr ? settings_.limits.shape.threads / 32 : 0,
                    device_ == nullptr);
  }
  struct Unset {
    GroupProfile*& p;
    ~Unset() { p = nullptr; }
  } unset{profile_};
  profile_ = profile ? &*profile : nullptr;
  std::vector<const plan::Task*> peerOps;
  groupPipeOps_ = pipeOps(tasks, settings_.limits);
  struct EndGroup {
    int& groupPipeOps;
    ~EndGroup() { groupPipeOps = 1; }  // (a lone call after the group: 1)
  } endGroup{groupPipeOps_};
  aggregated_ = askTunerTogether(tasks);
  struct EndAggregates {
    std::map<const plan::Task*, topo::Choice>& m;
    ~EndAggregates() { m.clear(); }
  } endAggregates{aggregated_};
  batching_ = device_ != nullptr;
  try {
    for (const plan::Task& t : tasks) {
      if (t.func == kernels::Func::kSendRecv) {
        peerOps.push_back(&t);
      } else {
        runCollective(t);
      }
    }
    flushLaunch();
  } catch (...) {
    // What was planned is launched even so: the other ranks may have launched theirs.
    try {
      flushLaunch();
    } catch (const Error& e) {
      BRAID_WARN("rank %d: %s", rank_, e.what());
    }
    batching_ = false;
    throw;
  }
  batching_ = false;
  if (peerOps.empty()) return;
  if (profile_ != nullptr) profile_->peersStart(peerOps);
  runPeers(peerOps);
  if (profile_ != nullptr) profile_->peersDone();
}

void DataPath::run(const plan::Task& task) {
  RelaxedCapture relaxed(device_.get());
  if (device_ != nullptr) checkDeviceTask(task);  // (a group's tasks were checked by checkOnDevice)
  if (task.func == kernels::Func::kSendRecv) {
    runPeers({&task});
  } else {
    runCollective(task);
  }
}

double DataPath::predict(const std::vector<plan::Task>& tasks) const {
  double total = 0, peers = 0;
  const topo::Tuner tuner = plan::tunerFor(nRanks_, settings_.limits);
  for (const plan::Task& t : tasks) {
    const uint64_t bytes = t.count * plan::typeSize(t.dtype);
    if (t.func == kernels::Func::kSendRecv) {
      if (t.peer != rank_) peers = std::max(peers, tuner.predictPeer(bytes, tuner.peerProtocol(bytes)));
    } else if (t.count > 0) {
      plan::PluginInputs inputs = pluginInputs(t);  // (as execute() would tell the plugin)
      inputs.numPipeOps = pipeOps(tasks, settings_.limits);
      total += plan::chooseFor(t, nRanks_, settings_.limits, inputs).timeUs;
    }
  }
  return total + peers;  // the sends and receives of a group run together, after its collectives
}

// NCCL 2.28's ncclPrepareTasks: a group's collectives of one function, reduction and type,
// smallest first, are taken together while each is under 4x the first one's size (NCCL's
// trafficBytes, which for one function keep the ratio of the sizes), and getAlgoInfo, so the
// tuner plugin, is asked once with their summed count; its answer runs them all. Braid asks
// the plugin the same way: where it decides, its answer runs every collective of the
// aggregate; where it leaves the table as it was, each runs Braid's own choice for its own
// size, as without a plugin. None is asked about again one by one.
std::map<const plan::Task*, topo::Choice> DataPath::askTunerTogether(const std::vector<plan::Task>& tasks) {
  std::map<const plan::Task*, topo::Choice> decided;
  if (tunerPlugin_ == nullptr) return decided;
  std::map<std::tuple<int, int, int>, std::vector<const plan::Task*>> kinds;
  for (const plan::Task& t : tasks) {
    if (t.func == kernels::Func::kSendRecv || t.func == kernels::Func::kAlltoAll || t.count == 0) continue;
    kinds[{static_cast<int>(t.func), static_cast<int>(t.red), static_cast<int>(t.dtype)}].push_back(&t);
  }
  for (auto& [kind, members] : kinds) {
    if (members.size() < 2) continue;
    std::stable_sort(members.begin(), members.end(),
                     [](const plan::Task* a, const plan::Task* b) { return a->count < b->count; });
    for (size_t first = 0; first < members.size();) {
      size_t end = first + 1;
      plan::Task together = *members[first];
      while (end < members.size() && members[end]->count < 4 * members[first]->count) {
        together.count += members[end++]->count;
      }
      if (end - first > 1) {
        const plan::PluginInputs inputs = pluginInputs(*members[first]);
        const topo::Choice choice = plan::chooseFor(together, nRanks_, settings_.limits, inputs, false);
        plan::PlanLimits own = settings_.limits;
        own.tunerPlugin = nullptr;
        const topo::Choice braid = plan::chooseFor(together, nRanks_, own, inputs, false);
        const bool pluginDecided = choice.algo != braid.algo || choice.proto != braid.proto ||
                                   choice.nChannels != braid.nChannels;
        BRAID_INFO(log::kTuning, "rank %d: %zu %s calls of the group asked the tuner plugin together, as %llu elements: "
                   "%s", rank_, end - first, members[first]->name, static_cast<unsigned long long>(together.count),
                   pluginDecided ? "its choice runs them all" : "it left Braid's, so each runs Braid's for its size");
        for (size_t i = first; i < end; ++i) {  // (not asked again one by one)
          decided[members[i]] = pluginDecided ? choice : plan::chooseFor(*members[i], nRanks_, own, inputs, false);
        }
      }
      first = end;
    }
  }
  return decided;
}

plan::PluginInputs DataPath::pluginInputs(const plan::Task& task) const {
  plan::PluginInputs inputs;
  if (tunerPlugin_ == nullptr) return inputs;
  inputs.numPipeOps = groupPipeOps_;
  // NCCL's getAlgoInfo looks each buffer up over the bytes the collective reads or writes
  // there (ncclFuncSendCount, ncclFuncRecvCount); AlltoAll never reaches a plugin.
  const size_t block = task.count * plan::typeSize(task.dtype);
  const size_t sendBytes = task.func == kernels::Func::kReduceScatter ? block * nRanks_ : block;
  const size_t recvBytes = task.func == kernels::Func::kAllGather ? block * nRanks_ : block;
  const bool registered = registrations_ != nullptr && registrations_->covers(task.sendbuff, sendBytes) &&
                          registrations_->covers(task.recvbuff, recvBytes);
  const bool captured = settings_.graphRegister && device_ != nullptr && device_->captureId(task.stream) != 0;
  inputs.regBuff = registered || captured ? 1 : 0;
  return inputs;
}

void DataPath::runCollective(const plan::Task& given) {
  const uint64_t seq = ++opSeq_;  // counted even when nothing moves, so every rank agrees
  if (given.count == 0) return;  // every rank has the same count: nothing moves anywhere
  plan::Task task = given;
  if (task.scalarAtRun != nullptr) std::memcpy(&task.opArgs.scalarBits, task.scalarAtRun, plan::typeSize(task.dtype));
  const uint64_t key = (static_cast<uint64_t>(task.func) << 56) | (task.count * plan::typeSize(task.dtype));
  // (a tuner plugin is asked every time: no cache; a group's aggregate once, askTunerTogether)
  // (the last size looked up first: a loop of one size finds it without hashing)
  const bool repeated = tunerPlugin_ == nullptr && lastChoice_ != nullptr && lastChoiceKey_ == key;
  auto known = tunerPlugin_ != nullptr || repeated ? choices_.end() : choices_.find(key);
  if (known != choices_.end()) {
    lastChoiceKey_ = key;
    lastChoice_ = &known->second;
  }
  const auto together = aggregated_.empty() ? aggregated_.end() : aggregated_.find(&given);
  const topo::Choice* decided = together != aggregated_.end()   ? &together->second
                                : repeated                      ? lastChoice_
                                : known != choices_.end()       ? &known->second
                                                                : nullptr;
  // The most a step of this call can carry: a rank's whole buffer (every rank's block for the
  // gathers and exchanges), its message otherwise.
  const bool wholeBuffer = task.func == kernels::Func::kAllGather || task.func == kernels::Func::kReduceScatter ||
                           task.func == kernels::Func::kAlltoAll;
  const uint64_t stepReach = task.count * plan::typeSize(task.dtype) * (wholeBuffer ? nRanks_ : 1);
  plan::CollPlan plan = plan::planCollective(task, nRanks_, settings_.limits, decided, pluginInputs(task), &ledger_);
  const bool firstOfSize = !repeated && known == choices_.end();  // (with a tuner plugin: every call)
  if (firstOfSize && tunerPlugin_ == nullptr) {
    if (choices_.size() >= 4096) forgetChoices();  // many sizes: start again rather than grow
    lastChoiceKey_ = key;
    lastChoice_ = &choices_.emplace(key, plan.tuned).first->second;
  }
  if (profile_ != nullptr) profile_->collStart(task, plan);
  std::vector<char> staged;
  if (task.func == kernels::Func::kAlltoAll) {
    // In place, a block would be overwritten before it is sent: the input is copied first.
    const size_t total = task.count * plan::typeSize(task.dtype) * static_cast<size_t>(nRanks_);
    const char* in = static_cast<const char*>(task.sendbuff);
    const char* out = static_cast<const char*>(task.recvbuff);
    if (in < out + total && out < in + total) {
      if (device_ != nullptr) {
        fail(ncclInvalidUsage, "%s: in-place AlltoAll (sendbuff and recvbuff overlap) is not supported by the CUDA "
                               "backend yet", task.name);
      }
      staged.assign(in, in + total);
      task.sendbuff = staged.data();
      for (int c = 0; c < plan.nChannels; ++c) plan.works[c].sendbuff = staged.data();
    }
    if (plan.choice.algo == kernels::Algo::kDirect) return runAllToAllDirect(task);
  }
  const HostCollectiveFn fn = plan.copy ? kCopyFunction : kReductionTable[static_cast<int>(task.red)][task.dtype];
  if (fn == nullptr && device_ == nullptr) {
    fail(ncclInvalidUsage, "this operator and type are not instantiated in this build (-Donly_funcs=%s)", kOnlyFuncs);
  }
  const kernels::OpSignature sig = makeSignature(seq, task);
  // From here a dead peer or a peer's failure ends the wait.
  Watchdog::Operation running(*watchdog_, sig, task.name, plan.nChannels);
  const kernels::RingHandle* ring = nullptr;
  // (Not zeroed: 64 of them are 14 KB, and their memset had been a fifth of a small
  // collective's time on the host; the loop below fills the channels used.)
  std::array<kernels::RingHandle, kMaxChannels> unconnectedRings;
  try {
    // Announce the collective on ring channel 0 (connected first, by every collective alike):
    // a neighbour stuck anywhere, even in connection setup, compares it with its own.
    if (nRanks_ > 1) {
      const kernels::RingHandle& first = rings(1)[0];
      transport::writeAnnouncement(first.send.announce, sig);
      if (!neighbourWatched_) {
        watchdog_->watchNeighbour(first.recv.announce, first.recv.peer);
        neighbourWatched_ = true;
      }
    }
    const kernels::Algo algo = plan.works[0].algo;
    if (algo == kernels::Algo::kRing) {
      ring = rings(plan.nChannels);
    } else {  // the ring handles only say where this rank is
      if (algo == kernels::Algo::kTree) {  // over each channel's tree connections
        prepareTrees(plan.nChannels, plan.works.data());
      } else if (algo == kernels::Algo::kHier2D) {  // over each channel's row and column rings
        prepareGrid(plan.nChannels, plan.works.data());
      } else {  // the others over each channel's connections to the ranks they exchange with
        preparePeers(algo, plan.nChannels, plan.works.data());
      }
      for (int c = 0; c < plan.nChannels; ++c) unconnectedRings[c] = kernels::RingHandle{{}, {}, nRanks_, rank_};
      ring = unconnectedRings.data();
    }
  } catch (const Error&) {
    rethrowWithReason(task.name, seq);
  }
  if (watchesNetwork(task.stream)) {
    const auto traces = netTraces();
    for (int c = 0; c < plan.nChannels && !traces.empty(); ++c) {
      if (plan.works[c].algo == kernels::Algo::kRing) {
        watchProxy(traces, ring[c].send, true, c, plan.proto);
        watchProxy(traces, ring[c].recv, false, c, plan.proto);
        continue;
      }
      for (int r = 0; r < nRanks_; ++r) {  // (an end the algorithm does not use reports nothing)
        if (plan.works[c].peerSend != nullptr) watchProxy(traces, plan.works[c].peerSend[r], true, c, plan.proto);
        if (plan.works[c].peerRecv != nullptr) watchProxy(traces, plan.works[c].peerRecv[r], false, c, plan.proto);
      }
    }
  }
  if (device_ != nullptr && profile_ == nullptr) return enqueueCollective(task, plan, ring, sig);
  if (device_ != nullptr) {
    struct Restore {
      bool& b;
      bool was;
      ~Restore() { b = was; }
    } restore{batching_, batching_};
    if (profile_ != nullptr && profile_->watchesNextLaunch()) batching_ = false;  // (a watched launch runs alone)
    return enqueueWatched(task.stream, plan.nChannels, true, [&] { enqueueCollective(task, plan, ring, sig); });
  }
  if (firstOfSize) prefaultSlots(plan, ring, stepReach);
  void* scratch = plan.scratchBytes > 0 ? scratch_.reserve(plan.scratchBytes) : nullptr;
  if (plan.scratchBytes > 0 && scratch == nullptr) {
    fail(ncclSystemError, "rank %d: cannot map %llu bytes of scratch memory for %s", rank_,
         static_cast<unsigned long long>(plan.scratchBytes), task.name);
  }
  if (connector_.usesNetwork()) proxy::post();  // the proxy passes without waiting while this runs
  for (int c = 0; c < plan.nChannels; ++c) {
    plan.works[c].scratch = scratch;  // each channel's part of it at its own offsets
    plan.works[c].sig = sig;
    plan.works[c].checkSig = settings_.checkMismatch ? 1 : 0;
    plan.works[c].status = &statuses_[c];
  }
  std::atomic<bool> aborted{false};
  uint64_t* times = profile_ != nullptr ? profile_->beforeRun() : nullptr;  // (KernelCh events)
  executor_.runChannels(plan.nChannels, [&](int c, HostGroup& g) {
    if (times != nullptr && g.rank() == 0) times[2 * c] = plugin::profilerClock();
    if (!fn(g, plan.works[c], ring[c], abort_)) aborted.store(true, std::memory_order_relaxed);
    if (times != nullptr && g.rank() == 0) times[2 * c + 1] = plugin::profilerClock();
  });
  if (profile_ != nullptr) profile_->afterRun(plan.nChannels);
  scratch_.release();
  if (aborted.load()) failAborted("the operation");
}

void DataPath::enqueueCollective(const plan::Task& task, plan::CollPlan& plan, const kernels::RingHandle* ring,
                                 const kernels::OpSignature& sig) {
  const uint64_t bytes = task.count * plan::typeSize(task.dtype);
  const bool blocksIn = task.func == kernels::Func::kReduceScatter || task.func == kernels::Func::kAlltoAll;
  const bool blocksOut = task.func == kernels::Func::kAllGather || task.func == kernels::Func::kAlltoAll;
  const ByteRange reads = ByteRange::of(task.sendbuff, blocksIn ? bytes * nRanks_ : bytes);
  const ByteRange writes = ByteRange::of(task.recvbuff, blocksOut ? bytes * nRanks_ : bytes);
  const LaunchKey key{task.stream, plan.nChannels, plan.copy, static_cast<int>(task.red), task.dtype};
  const bool batch = batching_ && plan.scratchBytes == 0;  // (scratch: one region, so one work at a time)
  if (!batch || !pending_.accepts(key, ring, reads, writes)) flushLaunch();
  void* scratch = plan.scratchBytes > 0 ? device_->scratch(plan.scratchBytes) : nullptr;
  for (int c = 0; c < plan.nChannels; ++c) {
    plan.works[c].scratch = scratch;
    plan.works[c].sig = sig;
    plan.works[c].checkSig = settings_.checkMismatch ? 1 : 0;
    plan.works[c].status = &statuses_[c];
  }
  pending_.add(key, ring, reads, writes, plan.works.data());
  pendingName_ = task.name;
  if (!batch) flushLaunch();
}

void DataPath::flushLaunch() {
  if (pending_.empty()) return;
  const int nWorks = pending_.size();
  const LaunchKey key = pending_.key();
  // (taken first, so that a launch that throws is not retried; the rings stay until the next add)
  const std::vector<kernels::CollWork> works = pending_.take();
  device_->launchCollective(works.data(), nWorks, pending_.rings(), key.nChannels, nRanks_, key.copy, key.red, key.dtype,
                            key.stream, nWorks > 1 ? "a group's collectives" : pendingName_);
}

void DataPath::checkOnDevice(const std::vector<plan::Task>& tasks) {
  if (device_ == nullptr) return;
  RelaxedCapture relaxed(device_.get());
  for (const plan::Task& t : tasks) checkDeviceTask(t);
  // One launch may serve several of the group's streams (joined by events): they must all be
  // captured into one graph, or none be captured (NCCL refuses a mix too).
  for (size_t i = 1; i < tasks.size(); ++i) {
    if (tasks[i].stream == tasks[0].stream) continue;
    if (device_->captureId(tasks[i].stream) != device_->captureId(tasks[0].stream)) {
      fail(ncclInvalidUsage, "%s and %s: rank %d's operations in one group are on streams of which not all are being "
                             "captured into the same CUDA graph; capture them all together, or none", tasks[0].name,
           tasks[i].name, rank_);
    }
  }
}

void DataPath::checkDeviceTask(const plan::Task& task) {
  if (watchdog_->checkMismatch()) {  // a kernel that found one ended early; say so at the next call
    ncclResult_t code;
    std::string text;
    if (watchdog_->failure(&code, &text)) throw Error(code, text);
  }
  if (task.scalarAtRun != nullptr) {
    fail(ncclInvalidUsage, "%s: a PreMulSum scalar in device memory (ncclScalarDevice) is not supported by the CUDA "
                           "backend yet; use ncclScalarHostImmediate", task.name);
  }
  device_->checkStream(task.stream, localDeviceRanks_, task.name);
  device_->checkBuffer(task.sendbuff, "sendbuff", task.name);
  device_->checkBuffer(task.recvbuff, "recvbuff", task.name);
}

bool DataPath::capturing(void* stream) const {
  if (device_ == nullptr) return false;
  try {
    return device_->captureId(stream) != 0;
  } catch (const Error&) {  // (an invalidated capture: the operation itself says so)
    return false;
  }
}

bool DataPath::watchesNetwork(void* stream) const {
  if (profile_ == nullptr || !profile_->wantsProxy() || !connector_.usesNetwork()) return false;
  return device_ == nullptr || device_->captureId(stream) == 0;  // (a graph's replays are not watched)
}

void DataPath::enqueueWatched(void* stream, int nChannels, bool collective, const std::function<void()>& enqueue) {
  const bool watched = profile_ != nullptr && device_->captureId(stream) == 0;
  const std::shared_ptr<DeviceWatch> watch =
      watched ? profile_->takeDeviceWatch(statuses_, nChannels, collective) : nullptr;
  if (watch == nullptr) return enqueue();
  flushLaunch();  // (the group's collectives before, unwatched)
  if (!device_->hostFunction(stream, [watch] { watch->arm(); })) return enqueue();
  try {
    enqueue();
  } catch (...) {
    device_->hostFunction(stream, [watch] { watch->finish(); });
    throw;
  }
  device_->hostFunction(stream, [watch] { watch->finish(); });
}

std::map<const uint64_t*, proxy::OpTrace*> DataPath::netTraces() const {
  std::map<const uint64_t*, proxy::OpTrace*> traces;
  connector_.forEachEnd([&](const transport::Connector::End& end) {
    if (proxy::OpTrace* t = end.memory->opTrace()) traces[end.memory->stepWord(end.isSend)] = t;
  });
  return traces;
}

void DataPath::watchProxy(const std::map<const uint64_t*, proxy::OpTrace*>& traces, const kernels::ConnHandle& h,
                          bool isSend, int channel, kernels::Proto proto, int op) {
  const auto found = h.step != nullptr ? traces.find(h.step) : traces.end();
  if (found != traces.end()) profile_->watch(found->second, h, isSend, channel, proto, abort_, op);
}

}  // namespace braid::datapath
