// What the planner hands the kernels: plain, trivially copyable structs, and the chunk and
// partition maths both sides use, so they can never disagree.
#pragma once

#include "kernels/platform.h"
#include "kernels/reduce.h"

namespace braid::kernels {

/// FIFO slots per connection and protocol (NCCL_STEPS).
constexpr int kSteps = 8;

enum class Func : uint8_t { kBroadcast = 0, kReduce, kAllGather, kReduceScatter, kAllReduce, kAlltoAll, kSendRecv, kCount };
/// Same order as NCCL's protocol indices.
enum class Proto : uint8_t { kLL = 0, kLL128 = 1, kSimple = 2, kCount };
/// Tree and Ring as NCCL's algorithm indices, then Braid's own.
enum class Algo : uint8_t {
  kTree = 0, kRing = 1, kDirect = 2, kRecDoubling = 3, kHalvingDoubling = 4, kBinomial = 5, kHier2D = 6,
  kPairwise = 7, kBruck = 8, kCount
};
/// Device-side reduction kinds (Avg becomes PreMulSum or SumPostDiv in the planner).
enum class RedKind : uint8_t { kSum = 0, kProd, kMax, kMin, kPreMulSum, kSumPostDiv, kCount };

/// One LL line: two 8-byte halves of {4 data bytes, 4 flag bytes}. Valid when both flags
/// equal the step's flag value. Each half is written and read whole (on a GPU the whole line
/// in one 16-byte access, on the host each half in one 8-byte atomic access, relaxed): a
/// reader that sees the flag sees the data beside it, and no other memory hangs on it, so no
/// release or acquire is needed (on a GPU each system-scope release would cost a fence).
struct LLLine {
  uint32_t data1, flag1, data2, flag2;
};
static_assert(sizeof(LLLine) == 16);

/// Writes an LL line: each 4 bytes of payload beside `flag` (storePair: one store on a GPU).
BRAID_INLINE void writeLLLine(LLLine* line, const uint32_t payload[2], uint32_t flag) {
  storePair(line, uint64_t(payload[0]) | (uint64_t(flag) << 32), uint64_t(payload[1]) | (uint64_t(flag) << 32));
}
/// An LL line's two halves as loaded (lo, hi) into payload; true when both carry `flag`.
BRAID_INLINE bool unpackLLLine(uint64_t lo, uint64_t hi, uint32_t flag, uint32_t payload[2]) {
  payload[0] = static_cast<uint32_t>(lo);
  payload[1] = static_cast<uint32_t>(hi);
  return static_cast<uint32_t>(lo >> 32) == flag && static_cast<uint32_t>(hi >> 32) == flag;
}
/// Reads an LL line into payload; true when both halves carry `flag` (the line has arrived).
BRAID_INLINE bool readLLLine(const LLLine* line, uint32_t flag, uint32_t payload[2]) {
  uint64_t lo = 0, hi = 0;
  loadPair(line, &lo, &hi);
  return unpackLLLine(lo, hi, flag, payload);
}

/// One LL128 line: 128 bytes, 15 words of data and, last, one 8-byte flag (the step + 1).
/// The writer stores the data words, then the flag with release; a reader that sees the flag
/// with acquire may read the data. 120 bytes of payload per 128, against LL's 8 per 16.
struct LL128Line {
  uint64_t words[16];
};
static_assert(sizeof(LL128Line) == 128);
constexpr int kLL128DataWords = 15;
constexpr int kLL128FlagWord = 15;

/// What both ends of a connection must agree a collective is: the communicator's sequence
/// number of the call (from 1; 0 means "not checked", as for send/recv) and two words that
/// encode the function, type, op, root and count (see src/datapath/signature.h).
struct OpSignature {
  uint64_t seq;
  uint64_t words[2];
};

/// The signature of the collective whose first step is step `stamp - 1`, written by the sender
/// in the slot of that step just before its data: it travels with the first slot and costs no
/// round trip. The receiver waits for stamp == its own first step + 1, then compares.
struct SigSlot {
  uint64_t stamp;
  OpSignature sig;
};
static_assert(sizeof(SigSlot) == 32);

/// One waiting thread's note of what it waits for (ChannelStatus::creditWait).
struct WaitNote {
  uint64_t step;
  int32_t peer;
  uint32_t kind;  ///< kWaitNone, or the WaitKind (written last, with release)
  uint32_t transport;
  uint32_t reserved;
};

/// What one channel is doing, for the watchdog and its hang report. Written by the kernel's
/// waiting threads with relaxed stores (diagnostic only); read by the watchdog thread.
struct ChannelStatus {
  uint64_t progress;   ///< steps completed so far (monotonic)
  uint64_t waitStep;   ///< the connection step being waited for
  int32_t waitPeer;    ///< the rank waited on
  uint32_t waitKind;   ///< 0 not waiting, then WaitKind
  uint32_t waitTransport;
  uint32_t mismatch;   ///< a Mismatch: what a peer sent differs from what this rank expects (details below)
  int32_t mismatchPeer;
  uint32_t mismatchTransport;  ///< kMismatchStepSize: the connection's transport::Kind
  OpSignature peerSig;  ///< kMismatchSignature: the peer's
  uint64_t badStep;     ///< kMismatchStepSize: the step, the bytes this rank's kernel expected and
  uint64_t badStepWanted;  ///< its description as it arrived (stepInfo)
  uint64_t badStepGot;
  // A GPU block writes each number with its time in one 16-byte store (cuda_entry.cuh,
  // markStarted/markDone): they are pairs, 16 bytes aligned.
  alignas(16) uint64_t startedSeq;  ///< a GPU kernel's launch number, written as its block of this channel starts
  uint64_t startTime;   ///< the GPU's global timer (ns) as that block started
  uint64_t doneSeq;     ///< the launch number, written as the block ends (however): unequal while one runs here
  uint64_t doneTime;    ///< and the time it ended (the profiler's KernelCh events, read once the launch is done)
  /// A collective's wait for free slots (kernels/primitives.h): another thread than the one
  /// that waits for data at the same time (waitKind), so each has a note of its own.
  WaitNote creditWait;
};
enum WaitKind : uint32_t { kWaitNone = 0, kWaitData = 1, kWaitCredits = 2, kWaitSignature = 3 };
enum Mismatch : uint32_t { kMismatchNone = 0, kMismatchSignature = 1, kMismatchStepSize = 2 };

/// What a sender records of each step before publishing tail, for a transport that forwards
/// the step (the network proxy): the payload's bytes, and kStepLL when they are LL lines
/// (16 bytes per line, flags included) or kStepLL128 when LL128 lines (128 bytes per line,
/// flags included) rather than Simple data.
constexpr uint64_t kStepLL = uint64_t(1) << 32;
constexpr uint64_t kStepLL128 = uint64_t(1) << 33;
/// A send's whole message went straight into the receiver's buffer, which it had offered
/// (send_recv.h): the step carries no slot data.
constexpr uint64_t kStepDirect = uint64_t(1) << 34;
/// A host send's Simple step whose slot holds the address of its bytes in the sender's own
/// memory instead of the bytes: the network proxy sends them from there (send_recv.h,
/// PeerOp::byReference).
constexpr uint64_t kStepReference = uint64_t(1) << 35;
BRAID_INLINE uint64_t stepInfo(uint64_t bytes, bool ll) { return bytes | (ll ? kStepLL : 0); }

/// ConnHandle::transport values from this one on (transport::Kind's Socket, IB and net plugins)
/// carry each step over a network in a frame whose declared length lands in the step's size;
/// the others' sizes are written by the sending kernel itself.
constexpr uint16_t kFirstNetworkTransport = 3;

/// One end of a connection as a kernel sees it. The FIFO memory lives wherever the transport
/// put it (the receiver's heap, a shared segment, device memory); step is this rank's own.
struct ConnHandle {
  char* simple;          ///< kSteps slots of simpleStepBytes, simpleStride apart (simpleSlot)
  LLLine* ll;            ///< kSteps slots of llStepLines lines
  LL128Line* ll128;      ///< kSteps slots of ll128StepLines lines
  uint64_t* tail;        ///< last step the sender filled (Simple); written by the sender
  uint64_t* head;        ///< last step the receiver freed; written by the receiver
  uint64_t* step;        ///< this side's next step number (rank-local, persists across operations), first word of a 64-byte line of this end's (kCreditsSeenWord)
  SigSlot* sigs;         ///< kSteps signature slots, written by the sender
  uint64_t* sizes;       ///< kSteps step descriptions (stepInfo), written by the sender before tail
  OpSignature* announce; ///< the collective the sender is in (host code only; see watchdog.h)
  uint64_t* offer;       ///< the receiver's buffer for the operation at hand (send_recv.h's kOffer* words), written by the receiver
  uint32_t simpleStepBytes;
  /// Bytes from one Simple slot to the next: simpleStepBytes, or more where a transport keeps
  /// room between the slots (the net plugin transport: each step's 64-byte record right in
  /// front of its payload, so that both travel as one message).
  uint32_t simpleStride;
  uint32_t llStepLines;
  uint32_t ll128StepLines;
  int32_t peer;          ///< the rank at the other end
  uint16_t transport;    ///< transport::Kind of the connection (for reports; kFirstNetworkTransport)
  uint16_t slotsShared;  ///< 1: the slots are the receiver's GPU memory, mapped by a sender in another process
};

/// The word of the sender's step line (ConnHandle::step[kCreditsSeenWord]) that keeps the
/// receiver's head as the sender's collectives last read it, across operations: head only
/// grows, so a value once read stays a lower bound, and a sender that still has credits from
/// it reads head again only once they are used up (primitives.h). Each operation's first send
/// would otherwise read head in the receiver's memory, across the bus for GPUs. A stale value
/// only makes the sender read head again: sends and receives (send_recv.h) and Direct, which
/// read head themselves, leave it as it is.
constexpr int kCreditsSeenWord = 2;

/// checkStepBytes's report of a difference: out of line, so that a step's code holds no release
/// for it (perf/ptx_report.sh counts a step's).
BRAID_OUTLINE void recordStepMismatch(const ConnHandle& conn, uint64_t step, uint64_t wanted, uint64_t got,
                                      ChannelStatus* status) {
  if (status == nullptr) return;
  status->mismatchPeer = conn.peer;
  status->badStep = step;
  status->badStepWanted = wanted;
  status->badStepGot = got;
  status->mismatchTransport = conn.transport;
  storeRelease(&status->mismatch, static_cast<uint32_t>(kMismatchStepSize));
}

/// Thread 0 only, once tail says Simple step `step` on `conn` is there: whether it carries
/// exactly `bytes`, as its description in conn.sizes says (the sender's kernel writes it; a
/// network receiver lands the frame's length there, marked kStepDirect when it read the
/// payload straight into a receive's buffer). Collectives (primitives.h) and sends and
/// receives (send_recv.h, the GPU's peer kernel) check every Simple step they take. A transport whose framing broke (a frame
/// declaring fewer bytes than it carries, or more) would otherwise hand this step stale bytes
/// and only the next one would fail. On a difference it records the step, both sizes and the
/// peer in status and returns kAborted: the operation stops, and the host reports a protocol
/// error naming them (watchdog.cc).
BRAID_INLINE WaitResult checkStepBytes(const ConnHandle& conn, uint64_t step, uint64_t bytes, ChannelStatus* status) {
  // Only where a network frame's length lands in it: within a host or GPU the sizes are the
  // sending kernel's own (and, on a GPU, host memory whose read would cost every step).
  if (conn.transport < kFirstNetworkTransport) return WaitResult::kReady;
  const uint64_t got = loadRelaxed(conn.sizes + step % kSteps) & ~kStepDirect;  // (tail, read with acquire, was stored after it)
  if (got == bytes) return WaitResult::kReady;
  recordStepMismatch(conn, step, bytes, got, status);
  return WaitResult::kAborted;
}

/// A channel's ring as one rank sees it.
struct RingHandle {
  ConnHandle send;  ///< to the next rank
  ConnHandle recv;  ///< from the previous rank
  int32_t nRanks;
  int32_t index;    ///< this rank's position on the ring
};

/// A rank's neighbours in its channel's tree (Tree): ranks, -1 for none. Their connections
/// are peerSend/peerRecv of that channel.
struct TreeHandle {
  int32_t parent;  ///< -1 at the root
  int32_t children[3];
  int32_t nChildren;
};

/// A rank's place in the Hier2D grid (topology/grid.h): ranks, positions and sizes of the
/// ring within its row and within its column. Their connections are peerSend/peerRecv.
struct GridHandle {
  int32_t rowNext, rowPrev, rowSize, rowIndex;
  int32_t colNext, colPrev, colSize, colIndex;
};

/// One collective's share of the work on one channel.
struct CollWork {
  Func func;
  Proto proto;
  Algo algo;
  RedKind red;
  int32_t rootIndex;  ///< ring position of the root (Broadcast, Reduce)
  uint32_t elemSize;
  const void* sendbuff;
  void* recvbuff;
  uint64_t blockCount;     ///< elements per rank block (AllGather, ReduceScatter, AlltoAll) or in all (others)
  uint64_t channelOffset;  ///< this channel's first element within a block
  uint64_t channelCount;   ///< elements of a block this channel moves
  RedOpArgs opArgs;
  const ConnHandle* peerSend;  ///< the algorithms over point-to-point connections: one to every rank (indexed by rank; own entry unused; Tree: this channel's)
  const ConnHandle* peerRecv;
  TreeHandle tree;         ///< Tree: this channel's tree
  GridHandle grid;         ///< Hier2D: this rank's rows and columns
  void* scratch;           ///< the communicator's scratch memory, CollPlan::scratchBytes of it (HalvingDoubling ReduceScatter, Binomial Reduce and AllReduce, Bruck)
  OpSignature sig;         ///< written to every send connection before the first step
  uint32_t checkSig;       ///< compare the peers' signatures (BRAID_CHECK_MISMATCH)
  ChannelStatus* status;   ///< this channel's status (may be null)
};

/// The element range [offset, offset+count) of `part` out of `parts` near-equal pieces of
/// `total`, each a multiple of `align` elements except the last.
BRAID_INLINE void partition(uint64_t total, int parts, int part, uint64_t align, uint64_t* offset, uint64_t* count) {
  if (parts == 1) {  // (a small collective's one channel: no 64-bit divisions on its path)
    *offset = 0;
    *count = total;
    return;
  }
  uint64_t each = (total + parts - 1) / parts;
  each = (each + align - 1) / align * align;
  const uint64_t begin = each * part;
  *offset = begin < total ? begin : total;
  const uint64_t end = begin + each < total ? begin + each : total;
  *count = end > *offset ? end - *offset : 0;
}

/// One thread's share of [0, n) out of `parts` threads: indices begin, begin + stride, ...
/// below end. Contiguous runs (multiples of `align` but the last) on the host, a stride on the
/// GPU (kStridedShares).
struct Share {
  uint64_t begin, end, stride;
};
BRAID_INLINE Share shareOf(uint64_t n, int parts, int part, uint64_t align) {
  if (kStridedShares) return {static_cast<uint64_t>(part), n, static_cast<uint64_t>(parts)};
  uint64_t offset, count;
  partition(n, parts, part, align, &offset, &count);
  return {offset, offset + count, 1};
}

/// p + n, or null when p is null (buffers a rank does not use may be NULL).
/// The Simple slot of step `step` on conn (any thread).
BRAID_INLINE char* simpleSlot(const ConnHandle& conn, uint64_t step) {
  return conn.simple + step % kSteps * conn.simpleStride;
}

template <typename T>
BRAID_INLINE T* advance(T* p, uint64_t n) {
  return p == nullptr ? nullptr : p + n;
}

/// Sender, one thread: step `step` of conn is complete (its data, or all its LL lines, are
/// written): records what it holds, then publishes tail with release. Simple receivers wait
/// for tail; LL receivers read flags instead, but the network proxy forwards on tail.
BRAID_INLINE void publishStep(const ConnHandle& conn, uint64_t step, uint64_t info) {
  storeRelaxed(conn.sizes + step % kSteps, info);
  storeRelease(conn.tail, step + 1);
}

/// A collective's sender (primitives.h, publish), one thread, before publishing tail: records
/// what step `step` holds where anyone reads it. A collective's steps are read by size only on
/// a network connection (its proxy forwards each step by it; checkStepBytes checks it there);
/// elsewhere the sizes are host memory, where each write would cost a GPU a store across the
/// bus and hold up its next fence. (Sends and receives write theirs always: an offering
/// receiver reads kStepDirect there, send_recv.h.) The tail's release carries it.
BRAID_INLINE void recordStepSize(const ConnHandle& conn, uint64_t step, uint64_t info) {
  if (conn.transport >= kFirstNetworkTransport) storeRelaxed(conn.sizes + step % kSteps, info);
}

/// Elements that fit in one FIFO step of `proto` on this connection.
BRAID_INLINE uint64_t stepElements(Proto proto, const ConnHandle& conn, uint32_t elemSize) {
  const uint64_t bytes = proto == Proto::kLL      ? static_cast<uint64_t>(conn.llStepLines) * 8
                         : proto == Proto::kLL128 ? static_cast<uint64_t>(conn.ll128StepLines) * kLL128DataWords * 8
                                                  : conn.simpleStepBytes;
  return bytes / elemSize;
}

}  // namespace braid::kernels
