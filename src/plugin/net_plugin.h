// Net plugins (NCCL's ncclNet_v6..v11, include/nccl_net.h): loading, and one interface over
// every version for the plugin transport (transport/net/plugin).
//
// The library is looked for once per process, the first time a communicator needs a network
// (NCCL_NET_PLUGIN: a comma-separated list of paths or names, each found as plugin::open does;
// unset: libnccl-net.so; "none": no plugin). The newest symbol wins: ncclNetPlugin_v11 .. v6;
// ncclCollNetPlugin_v11 .. v6 is looked for and logged, but Braid runs no CollNet. A library
// that is missing is said at INFO; one that exists but exports no usable net, whose init
// fails, that reports no device or no host-memory support, is one WARN naming the file and the
// versions tried, and the process goes on with Braid's own networks. The library stays loaded
// for the rest of the process (its threads may outlive any communicator).
//
// v6..v10 are initialised once per process; v11 once per communicator (NetSession), with the
// communicator's hash (v10 and v11 with Braid's profiler callback, plugin/net_profiling.h), and finalized when the communicator's last connection closes. Every
// version is driven through NetSession's calls, which take v11's arguments (size_t sizes, one
// receive per irecv) and never throw: they return the plugin's result, or ncclInternalError for
// an answer that breaks the interface (a negative size, a size beyond what was posted).
//
// Which network a process uses is one rule, the transport's and the topology's (picks): the
// plugin when NCCL_NET is unset or names it, Braid's own IB or Socket otherwise. The topology
// asks for the plugin's devices (probe) before any communicator connects: they are its NICs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "nccl.h"

namespace braid::plugin {

/// NCCL_NET_HANDLE_MAXSIZE: the bytes of a listen handle.
constexpr size_t kNetHandleBytes = 128;
/// The most requests Braid keeps posted on one plugin comm: NCCL_NET_MAX_REQUESTS_V6, the
/// smallest any version allows.
constexpr int kNetMaxRequests = 8;
/// What NetSession::test says of a done request's size when the plugin left it unwritten (as
/// many plugins do: NCCL zeroes it before test and never relies on it).
constexpr size_t kNetSizeUnknown = ~size_t(0);

/// One device as the plugin describes it (v11's fields; older versions leave some zero).
struct NetDeviceProperties {
  std::string name;
  std::string pciPath;
  uint64_t guid = 0;
  int ptrSupport = 0;
  bool regIsGlobal = false;
  bool forceFlush = false;
  int speedMbps = 0;
  int port = 0;
  float latencyUs = 0;
  int maxComms = 0;
  int maxRecvs = 1;
  int netDeviceType = 0;
  uint64_t maxP2pBytes = 0;  ///< 0: not said (before v9)
};

/// The loaded plugin and its devices, as the topology sees them.
struct NetPluginDevices {
  std::string name;  ///< the plugin's name (NCCL_NET selects by it)
  int version = 0;
  std::string path;  ///< the library's path
  std::vector<NetDeviceProperties> devices;
};

struct LoadedNet;

/// A communicator's use of the net plugin.
class NetSession {
 public:
  /// The plugin's session for a communicator, loading the library first if this process has
  /// not looked yet; nullptr when there is none to use (said in the log). Never throws.
  static std::shared_ptr<NetSession> open(uint64_t commHash, int rank);

  /// NCCL_NET's rule: whether NCCL_NET (`net`: "" unset, any case) lets a plugin named
  /// `plugin` carry the network: when unset (a plugin with devices comes before IB and
  /// Socket, as in NCCL) or when it names the plugin.
  static bool picks(const std::string& net, const std::string& plugin);
  /// Whether NCCL_NET names one of Braid's own networks (IB, Socket): then no plugin is opened.
  static bool namesBuiltin(const std::string& net);

  /// The plugin and its devices when NCCL_NET picks it (`net`, see picks), for the topology:
  /// loaded as open loads it, the first time this process looks. A plugin not yet initialised
  /// is initialised as open would (v11: with commHash 0, the context finalized at once), so
  /// its devices are known before any communicator connects. nullopt when there is no plugin
  /// to use, NCCL_NET names another network, or (said in the log) it failed. Never throws.
  static std::optional<NetPluginDevices> probe(const std::string& net);
  ~NetSession();
  NetSession(const NetSession&) = delete;
  NetSession& operator=(const NetSession&) = delete;

  /// The plugin's name (NCCL_NET selects by it), its version, the library's path.
  const std::string& name() const;
  int version() const;
  const std::string& path() const;
  int devices() const;
  const NetDeviceProperties& properties(int dev) const;

  ncclResult_t listen(int dev, void* handle, void** listenComm);
  ncclResult_t connect(int dev, void* handle, void** sendComm);
  ncclResult_t accept(void* listenComm, void** recvComm);
  ncclResult_t regMr(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t deregMr(void* comm, void* mhandle);
  /// Whether the plugin has regMrDmaBuf, and iflush (a plugin of host memory only may lack them).
  bool canRegisterDmaBuf() const;
  bool canFlush() const;
  /// Registers [data, data + size) of a dma-buf: fd, data's offset in it (the caller keeps fd).
  ncclResult_t regMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle);
  /// Makes what one receive into GPU memory (data, size) delivered visible to the GPU; the
  /// flush is done when *request is null or test says so.
  ncclResult_t iflush(void* recvComm, void* data, size_t size, void* mhandle, void** request);
  /// phandle: the parent of the events the plugin starts through its profiler callback for
  /// this call (plugin/net_profiling.h; v10 and v11 get it, with the callback at init).
  ncclResult_t isend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void* phandle, void** request);
  ncclResult_t irecv(void* recvComm, void* data, size_t size, int tag, void* mhandle, void* phandle, void** request);
  /// *size: the bytes moved, when done, as the plugin reports them; kNetSizeUnknown when it
  /// wrote nothing (or a negative size). Callers must not need it: they know what they posted.
  ncclResult_t test(void* request, int* done, size_t* size);
  ncclResult_t closeSend(void* sendComm);
  ncclResult_t closeRecv(void* recvComm);
  ncclResult_t closeListen(void* listenComm);

  /// "ncclSystemError (2)": a result for messages.
  static std::string resultText(ncclResult_t r);

 private:
  NetSession(std::shared_ptr<LoadedNet> net, void* context);
  std::shared_ptr<LoadedNet> net_;
  void* context_;  // v11's
};

}  // namespace braid::plugin
