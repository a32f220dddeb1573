#include "plugin/net_plugin.h"

#include <nccl_net.h>
#include <strings.h>

#include <algorithm>
#include <climits>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <sstream>
#include <type_traits>

#include "core/log.h"
#include "core/params.h"
#include "core/plugin_library.h"
#include "plugin/net_profiling.h"
#include "plugin/plugin_log.h"

namespace braid::plugin {

static_assert(kNetHandleBytes == NCCL_NET_HANDLE_MAXSIZE);
static_assert(kNetMaxRequests == NCCL_NET_MAX_REQUESTS_V6 && kNetMaxRequests <= NCCL_NET_MAX_REQUESTS);

namespace {

const std::vector<std::string> kNetSymbols = {"ncclNetPlugin_v11", "ncclNetPlugin_v10", "ncclNetPlugin_v9",
                                              "ncclNetPlugin_v8",  "ncclNetPlugin_v7",  "ncclNetPlugin_v6"};
const std::vector<std::string> kCollNetSymbols = {"ncclCollNetPlugin_v11", "ncclCollNetPlugin_v10",
                                                  "ncclCollNetPlugin_v9",  "ncclCollNetPlugin_v8",
                                                  "ncclCollNetPlugin_v7",  "ncclCollNetPlugin_v6"};

/// A plugin's string, bounded (it may be anything).
std::string bounded(const char* s) {
  if (s == nullptr) return "";
  return std::string(s, strnlen(s, 256));
}

}  // namespace

/// The calls of one version, in v11's form.
class NetApi {
 public:
  virtual ~NetApi() = default;
  /// The first function the version needs that the struct leaves NULL, or nullptr.
  virtual const char* missing() const = 0;
  /// v11: a communicator's context; older versions: the process's (ctx left null).
  virtual ncclResult_t init(void** ctx, uint64_t commId) = 0;
  virtual ncclResult_t finalize(void* ctx) = 0;
  virtual ncclResult_t devices(int* n) = 0;
  virtual ncclResult_t properties(int dev, NetDeviceProperties* p) = 0;
  virtual ncclResult_t listen(void* ctx, int dev, void* handle, void** comm) = 0;
  virtual ncclResult_t connect(void* ctx, int dev, void* handle, void** comm) = 0;
  virtual ncclResult_t accept(void* listenComm, void** comm) = 0;
  virtual ncclResult_t regMr(void* comm, void* data, size_t size, int type, void** mh) = 0;
  virtual ncclResult_t deregMr(void* comm, void* mh) = 0;
  /// Whether the struct has regMrDmaBuf and iflush (neither is required: a plugin of host
  /// memory only may leave them NULL).
  virtual bool hasRegMrDmaBuf() const = 0;
  virtual bool hasIflush() const = 0;
  virtual ncclResult_t regMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mh) = 0;
  virtual ncclResult_t iflush(void* comm, void* data, int size, void* mh, void** req) = 0;
  /// phandle: the profiler's parent of the plugin's events for this call (v10, v11 get it).
  virtual ncclResult_t isend(void* comm, void* data, size_t size, int tag, void* mh, void* phandle, void** req) = 0;
  virtual ncclResult_t irecv(void* comm, void* data, size_t size, int tag, void* mh, void* phandle, void** req) = 0;
  virtual ncclResult_t test(void* req, int* done, int* size) = 0;
  virtual ncclResult_t closeSend(void* comm) = 0;
  virtual ncclResult_t closeRecv(void* comm) = 0;
  virtual ncclResult_t closeListen(void* comm) = 0;
};

namespace {

/// The properties struct a getProperties(int dev, Props*) fills.
template <typename F>
struct PropertiesOf;
template <typename R, typename A, typename B>
struct PropertiesOf<R (*)(A, B)> {
  using type = std::remove_pointer_t<B>;
};

/// ncclNet_vV_t (of type T) behind NetApi: the differences between versions, one place each.
template <int V, typename T>
class VersionedNet final : public NetApi {
 public:
  explicit VersionedNet(const T* t) : t_(t) {}

  const char* missing() const override {
    const std::pair<const char*, bool> required[] = {
        {"init", t_->init != nullptr},         {"devices", t_->devices != nullptr},
        {"getProperties", t_->getProperties != nullptr}, {"listen", t_->listen != nullptr},
        {"connect", t_->connect != nullptr},   {"accept", t_->accept != nullptr},
        {"regMr", t_->regMr != nullptr},       {"deregMr", t_->deregMr != nullptr},
        {"isend", t_->isend != nullptr},       {"irecv", t_->irecv != nullptr},
        {"test", t_->test != nullptr},         {"closeSend", t_->closeSend != nullptr},
        {"closeRecv", t_->closeRecv != nullptr}, {"closeListen", t_->closeListen != nullptr}};
    for (const auto& [name, present] : required)
      if (!present) return name;
    if constexpr (V == 11) {
      if (t_->finalize == nullptr) return "finalize";
    }
    return nullptr;
  }

  ncclResult_t init(void** ctx, uint64_t commId) override {
    (void)ctx, (void)commId;
    if constexpr (V == 11) {
      ncclNetCommConfig_v11_t config{NCCL_NET_TRAFFIC_CLASS_UNDEF};
      return t_->init(ctx, commId, &config, pluginLog, netProfilerCallback);
    } else if constexpr (V == 10) {
      return t_->init(pluginLog, netProfilerCallback);
    } else {
      return t_->init(pluginLog);
    }
  }

  ncclResult_t finalize(void* ctx) override {
    if constexpr (V == 11) {
      return t_->finalize(ctx);
    } else {
      (void)ctx;
      return ncclSuccess;
    }
  }

  ncclResult_t devices(int* n) override { return t_->devices(n); }

  ncclResult_t properties(int dev, NetDeviceProperties* p) override { return propertiesOf(dev, p); }

  ncclResult_t listen(void* ctx, int dev, void* handle, void** comm) override {
    if constexpr (V == 11) {
      return t_->listen(ctx, dev, handle, comm);
    } else {
      (void)ctx;
      return t_->listen(dev, handle, comm);
    }
  }

  ncclResult_t connect(void* ctx, int dev, void* handle, void** comm) override {
    ncclNetDeviceHandle_v7_t* device = nullptr;  // no device offload asked for
    if constexpr (V == 11) {
      return t_->connect(ctx, dev, handle, comm, &device);
    } else if constexpr (V == 10) {
      ncclNetCommConfig_v10_t config{NCCL_NET_TRAFFIC_CLASS_UNDEF};
      return t_->connect(dev, &config, handle, comm, &device);
    } else if constexpr (V >= 7) {
      return t_->connect(dev, handle, comm, &device);
    } else {
      (void)device;
      return t_->connect(dev, handle, comm);
    }
  }

  ncclResult_t accept(void* listenComm, void** comm) override {
    if constexpr (V == 6) {
      return t_->accept(listenComm, comm);
    } else {
      ncclNetDeviceHandle_v7_t* device = nullptr;
      return t_->accept(listenComm, comm, &device);
    }
  }

  ncclResult_t regMr(void* comm, void* data, size_t size, int type, void** mh) override {
    if constexpr (V <= 7) {
      if (size > static_cast<size_t>(INT_MAX)) return ncclInvalidArgument;
      return t_->regMr(comm, data, static_cast<int>(size), type, mh);
    } else {
      return t_->regMr(comm, data, size, type, mh);
    }
  }

  ncclResult_t deregMr(void* comm, void* mh) override { return t_->deregMr(comm, mh); }

  bool hasRegMrDmaBuf() const override { return t_->regMrDmaBuf != nullptr; }
  bool hasIflush() const override { return t_->iflush != nullptr; }

  ncclResult_t regMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mh) override {
    if (t_->regMrDmaBuf == nullptr) return ncclInternalError;
    return t_->regMrDmaBuf(comm, data, size, type, offset, fd, mh);
  }

  ncclResult_t iflush(void* comm, void* data, int size, void* mh, void** req) override {
    if (t_->iflush == nullptr) return ncclInternalError;
    void* datas[1] = {data};
    int sizes[1] = {size};
    void* mhs[1] = {mh};
    return t_->iflush(comm, 1, datas, sizes, mhs, req);
  }

  ncclResult_t isend(void* comm, void* data, size_t size, int tag, void* mh, void* phandle, void** req) override {
    (void)phandle;
    if constexpr (V <= 8) {
      if (size > static_cast<size_t>(INT_MAX)) return ncclInvalidArgument;
      return t_->isend(comm, data, static_cast<int>(size), tag, mh, req);
    } else if constexpr (V == 9) {
      return t_->isend(comm, data, size, tag, mh, req);
    } else {
      return t_->isend(comm, data, size, tag, mh, phandle, req);
    }
  }

  ncclResult_t irecv(void* comm, void* data, size_t size, int tag, void* mh, void* phandle, void** req) override {
    (void)phandle;
    void* datas[1] = {data};
    int tags[1] = {tag};
    void* mhs[1] = {mh};
    if constexpr (V <= 8) {
      if (size > static_cast<size_t>(INT_MAX)) return ncclInvalidArgument;
      int sizes[1] = {static_cast<int>(size)};
      return t_->irecv(comm, 1, datas, sizes, tags, mhs, req);
    } else if constexpr (V == 9) {
      size_t sizes[1] = {size};
      return t_->irecv(comm, 1, datas, sizes, tags, mhs, req);
    } else {
      size_t sizes[1] = {size};
      void* phandles[1] = {phandle};
      return t_->irecv(comm, 1, datas, sizes, tags, mhs, phandles, req);
    }
  }

  ncclResult_t test(void* req, int* done, int* size) override { return t_->test(req, done, size); }
  ncclResult_t closeSend(void* comm) override { return t_->closeSend(comm); }
  ncclResult_t closeRecv(void* comm) override { return t_->closeRecv(comm); }
  ncclResult_t closeListen(void* comm) override { return t_->closeListen(comm); }

 private:
  ncclResult_t propertiesOf(int dev, NetDeviceProperties* p) {
    using Props = typename PropertiesOf<decltype(t_->getProperties)>::type;
    Props props;
    std::memset(&props, 0, sizeof props);
    const ncclResult_t r = t_->getProperties(dev, &props);
    if (r != ncclSuccess) return r;
    p->name = bounded(props.name);
    p->pciPath = bounded(props.pciPath);
    p->guid = props.guid;
    p->ptrSupport = props.ptrSupport;
    p->speedMbps = props.speed;
    p->port = props.port;
    p->latencyUs = props.latency;
    p->maxComms = props.maxComms;
    p->maxRecvs = props.maxRecvs;
    if constexpr (V >= 7) p->netDeviceType = static_cast<int>(props.netDeviceType);
    if constexpr (V >= 8) p->regIsGlobal = props.regIsGlobal != 0;
    if constexpr (V >= 9) {
      p->forceFlush = props.forceFlush != 0;
      p->maxP2pBytes = props.maxP2pBytes;
    }
    return ncclSuccess;
  }

  const T* t_;
};

std::unique_ptr<NetApi> adapt(int version, const void* symbol) {
  switch (version) {
    case 11: return std::make_unique<VersionedNet<11, ncclNet_v11_t>>(static_cast<const ncclNet_v11_t*>(symbol));
    case 10: return std::make_unique<VersionedNet<10, ncclNet_v10_t>>(static_cast<const ncclNet_v10_t*>(symbol));
    case 9: return std::make_unique<VersionedNet<9, ncclNet_v9_t>>(static_cast<const ncclNet_v9_t*>(symbol));
    case 8: return std::make_unique<VersionedNet<8, ncclNet_v8_t>>(static_cast<const ncclNet_v8_t*>(symbol));
    case 7: return std::make_unique<VersionedNet<7, ncclNet_v7_t>>(static_cast<const ncclNet_v7_t*>(symbol));
    default: return std::make_unique<VersionedNet<6, ncclNet_v6_t>>(static_cast<const ncclNet_v6_t*>(symbol));
  }
}

}  // namespace

/// The library and its net, for the rest of the process once found usable.
struct LoadedNet {
  Library library;
  int version = 0;
  std::string name;
  std::unique_ptr<NetApi> api;
  bool initialised = false;  ///< v6..v10: init ran (once per process); v11: the first session's did
  std::vector<NetDeviceProperties> devices;
};

namespace {

struct Registry {
  std::mutex mutex;
  bool looked = false;
  std::shared_ptr<LoadedNet> net;  ///< null after looking: none to use
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: communicators may end during exit
  return *r;
}

/// One of NCCL_NET_PLUGIN's entries: its library with a usable net, or nullptr (said).
std::shared_ptr<LoadedNet> loadOne(const std::string& value) {
  std::vector<Note> notes;
  Library library = open("net", value, "NET", &notes);
  sayNotes(notes, log::kNet);
  if (!library) return nullptr;
  int index = -1;
  const void* symbol = firstSymbol(library, kNetSymbols, &index);
  if (symbol == nullptr) {
    BRAID_WARN("NET/Plugin: %s exports none of %s; going on without a net plugin", library.path().c_str(),
               joinNames(kNetSymbols).c_str());
    return nullptr;
  }
  auto net = std::make_shared<LoadedNet>();
  net->version = 11 - index;
  net->name = bounded(*static_cast<const char* const*>(symbol));  // every version starts with its name
  if (net->name.empty()) net->name = "(unnamed)";
  net->api = adapt(net->version, symbol);
  if (const char* missing = net->api->missing(); missing != nullptr) {
    BRAID_WARN("NET/Plugin: %s: %s (%s) has no %s function; going on without a net plugin", library.path().c_str(),
               net->name.c_str(), kNetSymbols[index].c_str(), missing);
    return nullptr;
  }
  int collIndex = -1;
  if (firstSymbol(library, kCollNetSymbols, &collIndex) != nullptr) {
    BRAID_INFO(log::kInit | log::kNet, "NET/Plugin: %s also exports %s; Braid does not run CollNet, it is not used",
               library.path().c_str(), kCollNetSymbols[collIndex].c_str());
  }
  net->library = std::move(library);
  return net;
}

/// After the first successful init: the devices, which must be there and take host memory.
bool checkDevices(LoadedNet& net) {
  int n = 0;
  const ncclResult_t r = net.api->devices(&n);
  if (r != ncclSuccess || n <= 0) {
    BRAID_WARN("NET/Plugin: %s: net plugin %s (v%d) %s; going on without a net plugin", net.library.path().c_str(),
               net.name.c_str(), net.version,
               r != ncclSuccess ? ("devices() failed with " + NetSession::resultText(r)).c_str()
                                : ("reports " + std::to_string(n) + " devices").c_str());
    return false;
  }
  n = std::min(n, 64);
  for (int d = 0; d < n; ++d) {
    NetDeviceProperties p;
    const ncclResult_t pr = net.api->properties(d, &p);
    if (pr != ncclSuccess || (p.ptrSupport & NCCL_PTR_HOST) == 0 || p.maxRecvs < 1) {
      BRAID_WARN("NET/Plugin: %s: net plugin %s (v%d) device %d %s; going on without a net plugin",
                 net.library.path().c_str(), net.name.c_str(), net.version, d,
                 pr != ncclSuccess ? ("getProperties failed with " + NetSession::resultText(pr)).c_str()
                 : (p.ptrSupport & NCCL_PTR_HOST) == 0 ? "does not take host memory (NCCL_PTR_HOST), which Braid's network FIFOs are"
                                                       : "reports maxRecvs below 1");
      return false;
    }
    BRAID_INFO(log::kInit | log::kNet, "NET/Plugin: %s device %d: %s, %d Mbps, port %d, latency %.1f us, ptrSupport %#x, "
               "maxRecvs %d, maxComms %d%s%s", net.name.c_str(), d, p.name.c_str(), p.speedMbps, p.port, p.latencyUs,
               p.ptrSupport, p.maxRecvs, p.maxComms, p.pciPath.empty() ? "" : ", ", p.pciPath.c_str());
    net.devices.push_back(std::move(p));
  }
  return true;
}

/// The net this process uses (nullptr: none), looked for at the first call.
std::shared_ptr<LoadedNet> acquire() {
  Registry& r = registry();
  if (r.looked) return r.net;
  r.looked = true;
  const std::string value = params::process().lookup("NCCL_NET_PLUGIN").text;
  if (disabled(value)) {
    BRAID_INFO(log::kInit | log::kNet, "NET/Plugin: disabled by NCCL_NET_PLUGIN=%s", value.c_str());
    return nullptr;
  }
  std::stringstream list(value.empty() ? std::string(",") : value);  // (unset: the default name once)
  for (std::string part; std::getline(list, part, ',');) {
    if (part.empty() && !value.empty()) continue;
    if (auto net = loadOne(part)) {
      r.net = std::move(net);
      return r.net;
    }
    if (value.empty()) break;
  }
  return nullptr;
}

/// acquire(), with a failure to load said and remembered (no plugin then).
std::shared_ptr<LoadedNet> acquireOrNone(Registry& r) {
  try {
    return acquire();
  } catch (const std::exception& e) {
    BRAID_WARN("NET/Plugin: %s; going on without a net plugin", e.what());
    r.net = nullptr;
    return nullptr;
  }
}

/// Initialises `net` for a session (v11: each time, *context its answer; older versions: the
/// first time) and, the first time, reads its devices. False (said, and the plugin dropped for
/// the rest of the process, as NCCL does) when init fails or the devices are unusable.
bool initialise(Registry& r, LoadedNet& net, uint64_t commHash, const std::string& who, void** context) {
  const bool perComm = net.version == 11;
  if (perComm || !net.initialised) {
    const ncclResult_t ir = net.api->init(context, commHash);
    if (ir != ncclSuccess) {
      BRAID_WARN("NET/Plugin: %s: net plugin %s (v%d) init failed with %s %s; going on without a net plugin",
                 net.library.path().c_str(), net.name.c_str(), net.version, NetSession::resultText(ir).c_str(),
                 who.c_str());
      r.net = nullptr;  // as NCCL: a plugin whose init failed is not tried again
      return false;
    }
  }
  if (!net.initialised) {
    if (!checkDevices(net)) {
      if (perComm) net.api->finalize(*context);
      r.net = nullptr;
      return false;
    }
    net.initialised = true;
    BRAID_INFO(log::kInit | log::kNet, "NET/Plugin: Loaded net plugin %s (v%d) from %s, %zu device(s)",
               net.name.c_str(), net.version, net.library.path().c_str(), net.devices.size());
  }
  return true;
}

}  // namespace

bool NetSession::picks(const std::string& net, const std::string& plugin) {
  return net.empty() || strcasecmp(net.c_str(), plugin.c_str()) == 0;
}

bool NetSession::namesBuiltin(const std::string& net) {
  return strcasecmp(net.c_str(), "IB") == 0 || strcasecmp(net.c_str(), "Socket") == 0;
}

std::shared_ptr<NetSession> NetSession::open(uint64_t commHash, int rank) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::shared_ptr<LoadedNet> net = acquireOrNone(r);
  if (net == nullptr) return nullptr;
  void* context = nullptr;
  if (!initialise(r, *net, commHash, "on rank " + std::to_string(rank), &context)) return nullptr;
  return std::shared_ptr<NetSession>(new NetSession(std::move(net), context));
}

std::optional<NetPluginDevices> NetSession::probe(const std::string& net) {
  if (namesBuiltin(net)) return std::nullopt;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::shared_ptr<LoadedNet> loaded = acquireOrNone(r);
  if (loaded == nullptr || !picks(net, loaded->name)) return std::nullopt;
  if (!loaded->initialised) {
    void* context = nullptr;
    if (!initialise(r, *loaded, 0, "(for the topology)", &context)) return std::nullopt;
    if (loaded->version == 11) {
      const ncclResult_t fr = loaded->api->finalize(context);
      if (fr != ncclSuccess) BRAID_WARN("NET/Plugin: %s finalize failed with %s", loaded->name.c_str(), resultText(fr).c_str());
    }
  }
  return NetPluginDevices{loaded->name, loaded->version, loaded->library.path(), loaded->devices};
}

NetSession::NetSession(std::shared_ptr<LoadedNet> net, void* context) : net_(std::move(net)), context_(context) {}

NetSession::~NetSession() {
  if (net_->version == 11) {
    const ncclResult_t r = net_->api->finalize(context_);
    if (r != ncclSuccess) BRAID_WARN("NET/Plugin: %s finalize failed with %s", net_->name.c_str(), resultText(r).c_str());
  }
}

const std::string& NetSession::name() const { return net_->name; }
int NetSession::version() const { return net_->version; }
const std::string& NetSession::path() const { return net_->library.path(); }
int NetSession::devices() const { return static_cast<int>(net_->devices.size()); }
const NetDeviceProperties& NetSession::properties(int dev) const { return net_->devices.at(static_cast<size_t>(dev)); }

ncclResult_t NetSession::listen(int dev, void* handle, void** listenComm) {
  return net_->api->listen(context_, dev, handle, listenComm);
}
ncclResult_t NetSession::connect(int dev, void* handle, void** sendComm) {
  return net_->api->connect(context_, dev, handle, sendComm);
}
ncclResult_t NetSession::accept(void* listenComm, void** recvComm) { return net_->api->accept(listenComm, recvComm); }
ncclResult_t NetSession::regMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  return net_->api->regMr(comm, data, size, type, mhandle);
}
ncclResult_t NetSession::deregMr(void* comm, void* mhandle) { return net_->api->deregMr(comm, mhandle); }
bool NetSession::canRegisterDmaBuf() const { return net_->api->hasRegMrDmaBuf(); }
bool NetSession::canFlush() const { return net_->api->hasIflush(); }
ncclResult_t NetSession::regMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                                     void** mhandle) {
  return net_->api->regMrDmaBuf(comm, data, size, type, offset, fd, mhandle);
}
ncclResult_t NetSession::iflush(void* recvComm, void* data, size_t size, void* mhandle, void** request) {
  if (size > static_cast<size_t>(INT_MAX)) return ncclInvalidArgument;
  return net_->api->iflush(recvComm, data, static_cast<int>(size), mhandle, request);
}
ncclResult_t NetSession::isend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void* phandle,
                               void** request) {
  return net_->api->isend(sendComm, data, size, tag, mhandle, phandle, request);
}
ncclResult_t NetSession::irecv(void* recvComm, void* data, size_t size, int tag, void* mhandle, void* phandle,
                               void** request) {
  return net_->api->irecv(recvComm, data, size, tag, mhandle, phandle, request);
}
ncclResult_t NetSession::test(void* request, int* done, size_t* size) {
  int bytes = -1;  // (left alone by plugins that never report sizes)
  int finished = 0;
  const ncclResult_t r = net_->api->test(request, &finished, &bytes);
  if (r != ncclSuccess) return r;
  *done = finished != 0 ? 1 : 0;
  *size = finished == 0 ? 0 : bytes < 0 ? kNetSizeUnknown : static_cast<size_t>(bytes);
  return ncclSuccess;
}
ncclResult_t NetSession::closeSend(void* sendComm) { return net_->api->closeSend(sendComm); }
ncclResult_t NetSession::closeRecv(void* recvComm) { return net_->api->closeRecv(recvComm); }
ncclResult_t NetSession::closeListen(void* listenComm) { return net_->api->closeListen(listenComm); }

std::string NetSession::resultText(ncclResult_t r) {
  static const char* const names[] = {"ncclSuccess",       "ncclUnhandledCudaError", "ncclSystemError",
                                      "ncclInternalError", "ncclInvalidArgument",    "ncclInvalidUsage",
                                      "ncclRemoteError",   "ncclInProgress",         "ncclTimeout"};
  const int i = static_cast<int>(r);
  return (i >= 0 && i < 9 ? names[i] : "an unknown result") + std::string(" (") + std::to_string(i) + ")";
}

}  // namespace braid::plugin
