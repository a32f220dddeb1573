// The memory of one connection's FIFOs, and how its two ends find it.
//
// The receiver owns the memory: two counters on their own cache lines (tail, written by the
// sender; head, written by the receiver, unless the transport keeps head in the sender's memory:
// creditWord()), kSteps signature slots (written by the sender, see
// kernels/primitives.h), the sender's announcement of the collective it is in (read by the
// receiver's watchdog), two fault boxes (one written by each end when its rank fails), the
// size of each step (written by the sender before tail), each end's step counter (the
// receiver's with its offer beside it), the keys the receiver offers, then kSteps Simple slots,
// then kSteps LL slots, then kSteps LL128 slots. The slots may live apart from the rest
// (data()): in device memory when a GPU runs the kernels, while the control part stays in
// host memory the GPU maps, which the host's watchdog also reads; the words only kernels touch
// (tail, head, step counters, signatures) then go with the slots where the transport allows
// (kDeviceCounterBytes).
// Where the memory lives is the transport's choice: the receiver's heap when both ranks are
// threads of one process (transport/p2p), a POSIX shared-memory segment when they are
// processes on one host (transport/shm). The receiver describes it in a Descriptor that
// travels to the sender over the bootstrap channel. Across a network (transport/net) each end
// has a copy of its own, and the process's proxy thread keeps the two in step (over TCP in
// transport/net/socket, by RDMA in transport/net/ib, through a net plugin in transport/net/plugin).
#pragma once

#include <cstdint>
#include <type_traits>
#include <memory>
#include <string>

#include "core/socket.h"
#include "kernels/work.h"

namespace braid::proxy {
class OpTrace;
}

namespace braid::transport {

/// Sizes of one connection's FIFOs.
struct FifoSizes {
  uint32_t simpleStepBytes;
  uint32_t llStepLines;
  uint32_t ll128StepLines;
  uint64_t bytes() const;  ///< total bytes of the FIFO memory, counters included
};

enum class Kind : uint32_t { kP2p = 1, kShm = 2, kSocket = 3, kIb = 4, kPlugin = 5 };
static_assert(static_cast<uint32_t>(Kind::kSocket) == kernels::kFirstNetworkTransport &&
                  static_cast<uint32_t>(Kind::kShm) < kernels::kFirstNetworkTransport,
              "the kernels tell network connections by their transport (kernels/work.h)");

/// One end of a verbs (RDMA) connection, as the other end needs it: its RC queue pair, how to
/// route to it, and the registered FIFO memory RDMA writes go to (the receiver's FIFO; the
/// sender's credit word).
struct IbEndpoint {
  uint32_t qpn;
  uint32_t psn;      ///< first packet sequence number (24 bits)
  uint16_t lid;      ///< InfiniBand: the port's LID; RoCE: 0
  uint8_t port;
  uint8_t roce;      ///< 1: Ethernet link layer (routed by GID)
  uint8_t gid[16];
  uint8_t mtu;       ///< enum ibv_mtu of the port
  uint8_t reserved[3];
  uint64_t addr;     ///< the registered memory's address in its process
  uint32_t rkey;
  uint32_t reserved2;
};
static_assert(sizeof(IbEndpoint) == 48 && std::is_trivially_copyable_v<IbEndpoint>);

/// What the sender needs to reach the receiver's FIFO memory.
struct Descriptor {
  Kind kind;
  int32_t ownerPid;
  uint64_t address;  ///< kP2p: the token under which the receiver's process offers the memory (never an address)
  uint64_t bytes;
  FifoSizes sizes;
  char shmName[64];  ///< kShm: the segment's name
  net::SocketAddress::Packed listen;  ///< kSocket, kIb: where the receiver accepts the sender's sockets
  uint32_t nSockets;                  ///< kSocket: how many
  uint64_t nonce;                     ///< kSocket, kIb: random; the sender presents it (with the comm hash)
  IbEndpoint ib;                      ///< kIb: the receiver's queue pair and FIFO (the control socket as kSocket's)
  uint32_t dataShared;                ///< kShm: 1 when the slots are in the receiver's GPU memory (dataHandle)
  uint8_t dataHandle[80];             ///< kShm: FifoAllocator::exportData's handle of the slots (kHandleBytes)
  uint64_t ibSlots;                   ///< kIb: where the Simple slots are (host or GPU memory), for RDMA writes
  uint32_t ibSlotsRkey;               ///< kIb: their region's rkey
  int32_t netDevice;                  ///< kPlugin: the receiver's device in the net plugin (for messages)
  uint8_t netHandle[128];             ///< kPlugin: the plugin's listen handle (NCCL_NET_HANDLE_MAXSIZE)
  uint32_t netSlotsOnGpu;             ///< kPlugin: 1 when the receiver's Simple slots are in GPU memory
};
static_assert(std::is_trivially_copyable_v<Descriptor>);

/// What a sender answers a receiver's Descriptor with once it has taken hold of the FIFO (the
/// receiver may then let go of its segment's name): its rank and, between processes of one
/// host (kShm), where its credit line is, which the receiver maps and its kernels write head
/// into. From the wire: checked (transport/descriptor_check.h) before anything in it is used.
struct Acknowledgement {
  uint32_t magic;            ///< kAcknowledgementMagic
  int32_t rank;              ///< the sender's
  uint32_t credit;           ///< kCreditNone, kCreditSegment or kCreditDevice
  uint32_t reserved;
  char creditName[64];       ///< kCreditSegment: the sender's one-page segment (its shm name prefix)
  uint8_t creditHandle[80];  ///< kCreditDevice: FifoAllocator::exportData's handle (kHandleBytes)
};
static_assert(std::is_trivially_copyable_v<Acknowledgement>);
constexpr uint32_t kAcknowledgementMagic = 0x4b434142;  // "BACK"
/// Nothing to map: head is where the receiver's descriptor put it (network), or the FIFO's
/// shared prefix says (p2p).
constexpr uint32_t kCreditNone = 0;
/// A shared-memory segment of the sender's holding the line (host memory).
constexpr uint32_t kCreditSegment = 1;
/// The sender's GPU memory, exported (when the receiver's slots are GPU memory too).
constexpr uint32_t kCreditDevice = 2;

/// A failure notice one end leaves for the other: the peer's watchdog reads it and fails too,
/// with this text, instead of waiting for data that will never come.
struct FaultBox {
  uint32_t raised;  ///< 0, or kFaultRaised / kFaultLost / kFaultLeft once rank/code/text are written (release)
  int32_t rank;
  uint32_t code;    ///< ncclResult_t
  char text[244];
};
static_assert(sizeof(FaultBox) == 256);
/// The peer failed and says why.
constexpr uint32_t kFaultRaised = 1;
/// The connection to the peer broke without a word (written by this end's proxy): a failure
/// only while an operation is running, as a peer that exits after its last call is none.
constexpr uint32_t kFaultLost = 2;
/// The peer's communicator was destroyed or aborted (its text says which): like kFaultLost, a
/// failure only for an operation still waiting on that peer.
constexpr uint32_t kFaultLeft = 3;

/// The keys of the registered buffers a receiver offers now (kernels/algorithms/send_recv.h,
/// datapath/offered_buffers.h): a sender maps only these, and unmaps what drops out.
/// Written by the receiver's host as a seqlock: seq odd while the words change.
constexpr int kOfferedKeys = 30;
struct OfferedKeys {
  uint64_t seq;
  uint64_t count;
  uint64_t keys[kOfferedKeys];
};
static_assert(sizeof(OfferedKeys) == 256);

/// The offered keys of the connection whose handle (either end's) is h.
OfferedKeys* offeredKeysOf(const kernels::ConnHandle& h);

constexpr uint32_t kImportNone = 0;
constexpr uint32_t kImportMapped = 1;
constexpr uint32_t kImportClosed = 2;
/// A credit line's sender ended before its receiver mapped the line (creditStateWord): the
/// line is gone, and no sender waits for credits any more.
constexpr uint32_t kImportOwnerLeft = 3;

/// The announcement line is a seqlock: seq is 0 while the words change. Writer: the sender's
/// host thread (or, across a network, the receiver's proxy); readers: the receiver's watchdog
/// and the sender's proxy.
void writeAnnouncement(kernels::OpSignature* line, const kernels::OpSignature& sig);
/// False when the line is empty or being rewritten (look again later).
bool readAnnouncement(const kernels::OpSignature* line, kernels::OpSignature* out);

/// Where a backend wants FIFO memory (implemented in src/runtime: the CUDA backend's; the
/// host backend passes none and the transports use the host's heap or shared memory).
class FifoAllocator {
 public:
  virtual ~FifoAllocator() = default;
  /// Zeroed, page-aligned memory for the counters, signatures and fault boxes: read and
  /// written by the host and by the kernels at the same address.
  virtual void* allocateControl(size_t bytes) = 0;
  virtual void freeControl(void* p) = 0;
  /// Zeroed memory for the slots, where the kernels move data fastest (device memory);
  /// shareable: exportData will be asked to share it with another process.
  virtual void* allocateData(size_t bytes, bool shareable) = 0;
  virtual void freeData(void* p) = 0;
  /// Makes host memory (a shared segment, a network end's copy) reachable by the kernels at
  /// the same address, until unregisterHost.
  virtual void registerHost(void* p, size_t bytes) = 0;
  virtual void unregisterHost(void* p) = 0;
  /// Bytes of a handle exportData writes.
  static constexpr size_t kHandleBytes = 80;
  /// Writes into `handle` how another process of this host maps data memory p (from
  /// allocateData); false when this backend cannot share it (the slots then stay in the
  /// shared segment).
  virtual bool exportData(void* p, uint8_t* handle);
  /// Maps data memory another process exported (its exportData handle), of at least `bytes`
  /// (what the caller will touch; a handle from the wire that says less is refused); throws
  /// when it cannot.
  virtual void* importData(const uint8_t* handle, uint64_t bytes);
  /// Unmaps what importData returned.
  virtual void closeData(void* p);
  /// GPU Direct RDMA: a new dma-buf file descriptor (the caller closes it) for data memory
  /// [p, p + bytes) from allocateData, page-aligned, and p's offset in it; -1 when this backend
  /// or device cannot export one.
  virtual int dmabufFd(void* p, size_t bytes, uint64_t* offset);
  /// Whether the device's kernels see a NIC's writes into its memory in the order the NIC made
  /// them, so that a receiver may read RDMA-written slots without a flush (CUDA's GPUDirect
  /// RDMA writes ordering, "owner" or better).
  virtual bool ordersRemoteWrites();
  /// Whether a NIC reading this device's memory (a sender's GPU Direct RDMA) is fast enough to
  /// be the default (NCCL_NET_GDR_READ unset).
  virtual bool nicReadsWell();

  /// Suspend (transport/suspend.h): the device memory behind data memory p (allocateData's,
  /// `requested` bytes asked for): its bytes as allocated, and whether suspendData can give it
  /// back and keep its address (or gave it back: p is suspended). Memory exported to a peer
  /// process (exportData) is suspendable: that process lets go of its mapping at the same
  /// suspend (suspendImport) and maps the new memory at resume (resumeImport). Not memory a
  /// NIC was given (dmabufFd: it keeps the pages themselves), nor memory without an address
  /// reserved apart from its pages (cudaMalloc's, whose legacy IPC handle cannot be replaced).
  struct DataUse {
    uint64_t bytes = 0;
    bool suspendable = false;
  };
  virtual DataUse dataUse(void* p, uint64_t requested);
  /// Gives back the device memory behind p (dataUse: suspendable), keeping its address and a
  /// copy of its first keepBytes bytes, and withdraws its exportData handle; false, nothing
  /// changed, when it cannot. Only while no kernel and no peer touches it (suspend's barrier).
  virtual bool suspendData(void* p, uint64_t keepBytes);
  /// Gives p (suspendData's) memory again at the same address, reachable by the same devices:
  /// zeroed but for the first keepBytes, which are as they were; throws when it cannot. A peer
  /// that mapped it needs a new handle (exportData).
  virtual void resumeData(void* p);
  /// Suspend, the importer's side: lets go of this process's mapping of a peer's data memory
  /// (importData's p), keeping the address reserved, so that the owner's suspendData frees the
  /// physical memory; false, nothing changed, when this mapping cannot be replaced later (a
  /// legacy CUDA IPC handle's: the owner keeps that memory too).
  virtual bool suspendImport(void* p);
  /// Resume: maps the peer's new memory (its exportData handle after resumeData, `bytes` as
  /// importData's) at p, where suspendImport left the address reserved; throws when it cannot,
  /// or when the handle maps another size than the reservation. closeData releases p either way.
  virtual void resumeImport(void* p, const uint8_t* handle, uint64_t bytes);
};

/// Bytes of a FIFO's control part (counters, signatures, fault boxes, step counters): the
/// offset of the slots when they follow it.
uint64_t fifoControlBytes();

/// Where a transport puts the slots in a GPU's memory (p2p, shm), the words only kernels read
/// move there too, in front of the slots in the same allocation: tail, head, the sender's and
/// the receiver's step counters (a 64-byte line each), then the kSteps signature slots. The
/// receiver polls tail and reads its step and the signatures in its own GPU's memory, instead of
/// each access crossing the bus to mapped host memory; the sender's credit polls of head go GPU
/// to GPU for shm, and stay in the sender's own GPU for p2p, whose head is the sender's credit
/// line (creditWord(); head's place here then goes unused). Nothing on the host reads them for those transports
/// (the network transports' proxies, which do, keep everything in host memory).
constexpr uint64_t kDeviceCounterBytes = 4 * 64 + kernels::kSteps * sizeof(kernels::SigSlot);
static_assert(kDeviceCounterBytes % 128 == 0);
/// Bytes of such an allocation: the two counters' lines, then every protocol's slots.
uint64_t deviceDataBytes(const FifoSizes& sizes);

/// Bytes of a sender's credit line (transport/p2p, transport/shm): head alone, on a line of its
/// own in the sender's memory.
constexpr uint64_t kCreditLineBytes = 64;

/// One end's view of the FIFO memory: owner (receiver) or importer (sender).
class FifoMemory {
 public:
  virtual ~FifoMemory() = default;
  /// The control part (and, unless data() says otherwise, the slots after it).
  virtual char* base() const = 0;
  /// The slots: right after the control part, unless the transport put them elsewhere.
  virtual char* data() const { return base() + fifoControlBytes(); }
  /// Bytes from one Simple slot to the next (ConnHandle::simpleStride): simpleStepBytes unless
  /// the transport keeps room between them.
  virtual uint32_t simpleStride() const { return sizes_.simpleStepBytes; }
  /// The LL and LL128 slots: after the Simple ones, unless the transport put those elsewhere.
  virtual char* lineSlots() const { return data() + uint64_t(kernels::kSteps) * sizes_.simpleStepBytes; }
  /// A network end's trace of the steps its proxy moves, for the profiler plugin
  /// (proxy/op_trace.h); null for the other transports, which have no proxy.
  virtual proxy::OpTrace* opTrace() const { return nullptr; }
  /// Bytes of host memory at base() (the whole FIFO, unless the slots are elsewhere).
  virtual uint64_t hostBytes() const { return sizes_.bytes(); }
  /// Whether the slots are the receiver's GPU memory that a sender in another process maps:
  /// then the receiver offers its registered buffers (send_recv.h).
  virtual bool slotsShared() const { return false; }
  /// tail (here) and head's default place (64 bytes on, creditWord()): at the start of the control part, unless the
  /// transport put them where the kernels poll them faster (kDeviceCounterBytes in front of
  /// slots in the receiver's GPU memory, with the step counters and signatures after them).
  virtual uint64_t* counters() const { return reinterpret_cast<uint64_t*>(base()); }
  /// Whether the kernels' words are in device memory with the counters (see counters()).
  bool countersOnDevice() const { return reinterpret_cast<char*>(counters()) != base(); }
  /// head, the step the receiver freed last: 64 bytes after tail (counters()), unless the
  /// transport keeps it in the sender's memory, where the sender's credit wait polls it
  /// locally and the receiver writes it from afar (p2p: the sender's credit line).
  virtual uint64_t* creditWord() const { return counters() + 64 / sizeof(uint64_t); }
  /// Whether head is where counters() says (else in the sender's memory: creditWord()).
  bool headWithCounters() const { return creditWord() == counters() + 64 / sizeof(uint64_t); }
  /// The device memory (FifoAllocator::allocateData's) behind this end, if any, and the bytes
  /// asked for: the counters' allocation (countersOnDevice; the importer's view of it for a
  /// sender), or a network end's slots for GPU Direct RDMA.
  struct DeviceData {
    char* at = nullptr;
    uint64_t bytes = 0;
  };
  virtual DeviceData deviceData() const;
  /// The sender's own device memory behind its credit line (kCreditLineBytes, from its
  /// allocator), if any: a sender end's, which suspend gives back and restores as the
  /// receiver's counters.
  virtual DeviceData creditData() const { return {}; }
  /// A receiver's mapping of its sender's exported credit line (importData's), if any: what
  /// suspend lets go of and resume maps again at the same address (transport/suspend.h).
  virtual DeviceData importedCreditData() const { return {}; }
  /// The keys of the buffers the receiver offers now.
  OfferedKeys* offeredKeys() const;
  const FifoSizes& sizes() const { return sizes_; }
  /// The kernel-facing handle for this end (the sender's or the receiver's step counter).
  kernels::ConnHandle handle(bool isSender) const;
  /// This end's step counter, which kernels keep across operations: in the control part, or
  /// after tail and head when those are in device memory. The first word of a 64-byte line;
  /// the sender's also keeps the receiver's head as it last read it (kernels::kCreditsSeenWord).
  uint64_t* stepWord(bool isSender) const;
  /// The fault box written by the sender (bySender) or by the receiver.
  FaultBox* faultBox(bool bySender) const;
  /// Whether the sender maps slots it imported from the receiver's GPU memory (which the
  /// receiver may free only once it no longer does): kImportNone, kImportMapped, then
  /// kImportClosed, written by the sender; a word beside the sender's step counter.
  uint32_t* importStateWord() const;
  /// The same for the receiver's mapping of the sender's credit line (which the sender may free
  /// only once the receiver no longer maps it): written by the receiver, and by a sender that
  /// ends before the receiver mapped it (kImportOwnerLeft); a word on the receiver's step
  /// line, past its offer.
  uint32_t* creditStateWord() const;

 protected:
  explicit FifoMemory(const FifoSizes& sizes) : sizes_(sizes) {}
  FifoSizes sizes_;
};

}  // namespace braid::transport
