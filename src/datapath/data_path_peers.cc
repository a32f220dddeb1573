// The data path's sends and receives: a group's point-to-point operations (and AlltoAll's
// Direct, which is sends and receives), cut into parts over a peer's connection sets, queued per
// connection and run by the host (drivePeerQueues) or launched on a device; and the offered
// buffers' part of deregistration.
#include "datapath/data_path.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <tuple>
#include <vector>

#include "comm/registrations.h"
#include "core/status.h"
#include "kernels/algorithms/send_recv.h"
#include "proxy/control_events.h"
#include "proxy/proxy.h"
#include "runtime/host/peer_loop.h"
#include "datapath/profile_events.h"

namespace braid::datapath {

using runtime::host::drivePeerQueues;

void DataPath::enqueuePeers(const std::map<PeerQueueKey, std::deque<kernels::PeerOp>>& queues, void* stream,
                            const char* call) {
  std::vector<kernels::PeerOp> flat;
  std::vector<int> starts;
  std::vector<kernels::MappedBuffer> mapped;  // the offering sends' mapped buffers, a run per connection
  std::vector<size_t> mappedFrom;             // by flat's index: where its run starts
  bool captured = false, capturedKnown = false;
  offered_->refresh();
  for (const auto& [key, q] : queues) {
    starts.push_back(static_cast<int>(flat.size()));
    size_t from = 0;
    uint32_t n = 0;
    bool prepared = false;
    for (kernels::PeerOp op : q) {  // (done 0, not started: the kernel reads the step)
      if (op.offers && !op.isSend) {
        offered_->prepareReceive(op, [&] {
          return settings_.peerDirect && registrations_ != nullptr && registrations_->covers(op.buffer, op.bytes);
        });
      } else if (op.offers && !prepared) {  // (a launch captured into a graph maps nothing: it may outlive a mapping)
        if (!capturedKnown) captured = device_->captureId(stream) != 0, capturedKnown = true;
        from = mapped.size();
        n = offered_->prepareSend(op.conn, captured, &mapped);
        prepared = true;
      }
      if (op.offers && op.isSend) op.nMapped = n;
      mappedFrom.push_back(from);
      flat.push_back(op);
    }
  }
  starts.push_back(static_cast<int>(flat.size()));
  if (flat.empty()) return;
  for (size_t i = 0; i < flat.size(); ++i) flat[i].mapped = flat[i].nMapped > 0 ? mapped.data() + mappedFrom[i] : nullptr;
  // A block per connection's queue, as many as the sends and receives' channels (within the
  // rank's channels, so that the blocks of every rank on a GPU stay resident together:
  // capChannels), the rest shared round robin.
  const int nQueues = static_cast<int>(queues.size());
  const int blocks = peerBlocks(nQueues);
  Watchdog::Operation running(*watchdog_, kernels::OpSignature{}, call, blocks);  // (in flight until the kernel ends)
  device_->launchPeers(flat.data(), starts.data(), nQueues, blocks, mapped.data(), static_cast<int>(mapped.size()),
                       stream, call);
}

int DataPath::peerBlocks(int nQueues) const {
  return std::max(1, std::min({nQueues, peerChannels_.total, settings_.limits.maxChannels}));
}

void DataPath::registrationEnded(const void* buffer, size_t bytes) {
  if (offered_ == nullptr || registrations_ == nullptr) return;
  offered_->registrationEnded(buffer, bytes, [this](const void* p, size_t n) { return registrations_->overlaps(p, n); });
}

void DataPath::runAllToAllDirect(const plan::Task& task) {
  const size_t bytes = task.count * plan::typeSize(task.dtype);
  std::vector<plan::Task> ops;
  for (int p = 0; p < nRanks_; ++p) {
    plan::Task t = task;
    t.func = kernels::Func::kSendRecv;
    t.peer = p;
    t.isSend = true;
    t.sendbuff = static_cast<const char*>(task.sendbuff) + p * bytes;
    t.recvbuff = nullptr;
    ops.push_back(t);
    t.isSend = false;
    t.sendbuff = nullptr;
    t.recvbuff = static_cast<char*>(task.recvbuff) + p * bytes;
    ops.push_back(t);
  }
  warnEveryPeer("AlltoAll's Direct", peerChannels_.perPeer, true);
  try {  // every rank is here at once: every connection in one exchange (runPeers finds them made)
    for (int set = 0; set < peerChannels_.perPeer; ++set) connector_.connectEveryPeer(transport::peerSet(set));
  } catch (const Error&) {
    rethrowWithReason(task.name, opSeq_);
  }
  std::vector<const plan::Task*> pointers;
  for (const plan::Task& t : ops) pointers.push_back(&t);
  runPeers(pointers);
}

void DataPath::runPeers(const std::vector<const plan::Task*>& ops) {
  if (device_ == nullptr) return runPeersOn(ops);
  flushLaunch();  // (the group's collectives come first)
  // One launch serves every stream the group's sends and receives name: the first stream
  // waits for the others' earlier work, and they for the launch.
  void* main = ops.front()->stream;
  std::vector<void*> others;
  for (const plan::Task* t : ops)
    if (t->stream != main && std::find(others.begin(), others.end(), t->stream) == others.end()) others.push_back(t->stream);
  device_->joinStreams(main, others);
  runPeersOn(ops);
  device_->releaseStreams(main, others);
}

void DataPath::runPeersOn(const std::vector<const plan::Task*>& ops) {
  watchdog_->pointToPoint(opSeq_);
  // Sends to and receives from this rank itself are matched in order and copied.
  std::vector<const plan::Task*> selfSends, selfRecvs;
  std::vector<int> sendTo, recvFrom;
  for (const plan::Task* t : ops) {
    if (t->peer == rank_) {
      (t->isSend ? selfSends : selfRecvs).push_back(t);
    } else {
      (t->isSend ? sendTo : recvFrom).push_back(t->peer);
    }
  }
  if (selfSends.size() != selfRecvs.size()) {
    fail(ncclInvalidUsage, "rank %d posted %zu sends to itself but %zu receives from itself in one group", rank_,
         selfSends.size(), selfRecvs.size());
  }
  for (size_t i = 0; i < selfSends.size(); ++i) {
    const size_t sendBytes = selfSends[i]->count * plan::typeSize(selfSends[i]->dtype);
    const size_t recvBytes = selfRecvs[i]->count * plan::typeSize(selfRecvs[i]->dtype);
    if (sendBytes != recvBytes) {
      fail(ncclInvalidUsage, "rank %d sends %zu bytes to itself but receives %zu", rank_, sendBytes, recvBytes);
    }
    if (sendBytes > 0 && selfRecvs[i]->recvbuff != selfSends[i]->sendbuff) {
      if (device_ != nullptr) {
        device_->copy(selfRecvs[i]->recvbuff, selfSends[i]->sendbuff, sendBytes, ops.front()->stream);
      } else {
        std::memmove(selfRecvs[i]->recvbuff, selfSends[i]->sendbuff, sendBytes);
      }
    }
  }
  std::sort(sendTo.begin(), sendTo.end());
  sendTo.erase(std::unique(sendTo.begin(), sendTo.end()), sendTo.end());
  std::sort(recvFrom.begin(), recvFrom.end());
  recvFrom.erase(std::unique(recvFrom.begin(), recvFrom.end()), recvFrom.end());
  try {  // (a peer's every set at once, as NCCL: both ends then split any message alike)
    // In flight for the watchdog while connecting too: a peer that waits in a collective
    // meanwhile is a mismatch (Watchdog::pointToPoint), not a wait until the bootstrap timeout.
    Watchdog::Operation connecting(*watchdog_, kernels::OpSignature{}, ops.front()->name, 0);
    for (int set = 0; set < peerChannels_.perPeer; ++set) {
      connector_.connectPeers(sendTo, recvFrom, transport::peerSet(set));
    }
  } catch (const Error&) {
    rethrowWithReason(ops.front()->name, 0);
  }

  // One queue per connection: operations on one connection run in the order they were posted.
  // A large message splits into parts on the peer's connection sets (peerPartBytes), each a
  // queue of its own (a block on a GPU); both ends cut the same parts from the same size.
  std::map<PeerQueueKey, std::deque<kernels::PeerOp>> queues;
  const bool watched = watchesNetwork(ops.front()->stream);
  std::vector<std::tuple<size_t, int, kernels::PeerOp>> parts;  // (for the profiler: the task's index, the set)
  for (size_t i = 0; i < ops.size(); ++i) {
    const plan::Task* t = ops[i];
    if (t->peer == rank_) continue;
    const uint64_t total = t->count * plan::typeSize(t->dtype);
    const kernels::Proto proto = plan::peerProtocol(total, settings_.limits);
    const uint64_t part = proto == kernels::Proto::kSimple ? peerPartBytes(total, peerChannels_.perPeer) : total;
    char* base = t->isSend ? const_cast<char*>(static_cast<const char*>(t->sendbuff)) : static_cast<char*>(t->recvbuff);
    for (uint64_t offset = 0, set = 0; offset < total || set == 0; offset += part, ++set) {
      kernels::PeerOp op{};
      const int s = static_cast<int>(set);
      op.conn = t->isSend ? connector_.peerSend(t->peer, transport::peerSet(s))
                          : connector_.peerRecv(t->peer, transport::peerSet(s));
      op.buffer = base + offset;
      op.bytes = std::min(part, total - offset);
      op.proto = proto;
      op.isSend = t->isSend;
      // Both ends decide alike: the same size, and a connection within one process at both ends.
      // On GPUs only between ranks of one device: another device's kernels reach the receiver's
      // buffer only where peer access covers it (not memory pools or cuMem memory not mapped for
      // them), which the receiver alone could tell.
      op.direct = settings_.peerDirect && op.proto == kernels::Proto::kSimple &&
                  op.conn.transport == static_cast<uint32_t>(transport::Kind::kP2p) &&
                  (device_ == nullptr || deviceOf_[t->peer] == device_->ordinal());
      // Between processes, where the slots are the receiver's GPU memory: the receiver always
      // offers (key 0 for a buffer it cannot share), so a sender never waits for nothing; a sender
      // looks at offers unless NCCL_P2P_DIRECT_DISABLE says not to (offered_buffers.h).
      op.offers = device_ != nullptr && op.conn.slotsShared != 0 && op.proto == kernels::Proto::kSimple &&
                  (!op.isSend || settings_.peerDirect);
      // The host over sockets: the proxy writes a send's bytes to the socket from the user's
      // buffer and reads a receive's into it (send_recv.h, byReference), two copies fewer.
      op.byReference = device_ == nullptr && settings_.peerDirect && op.proto == kernels::Proto::kSimple &&
                       op.conn.transport == static_cast<uint32_t>(transport::Kind::kSocket);
      if (device_ == nullptr && !op.direct && !op.byReference) prefault_.cover(op.conn, op.proto, op.bytes);
      queues[{t->peer, t->isSend, s}].push_back(op);
      if (watched) parts.emplace_back(i, s, op);
    }
  }
  if (watched) {
    const auto traces = netTraces();
    for (const auto& [i, set, op] : parts) watchProxy(traces, op.conn, op.isSend, set, op.proto, static_cast<int>(i));
  }
  if (device_ != nullptr && profile_ == nullptr) return enqueuePeers(queues, ops.front()->stream, ops.front()->name);
  if (device_ != nullptr) {
    return enqueueWatched(ops.front()->stream, peerBlocks(static_cast<int>(queues.size())), false,
                          [&] { enqueuePeers(queues, ops.front()->stream, ops.front()->name); });
  }
  if (connector_.usesNetwork()) proxy::post();
  std::vector<std::deque<kernels::PeerOp>> ordered;  // (the map's order: by peer, then direction)
  for (auto& [key, q] : queues) ordered.push_back(std::move(q));
  Watchdog::Operation running(*watchdog_, kernels::OpSignature{}, ops.front()->name, 1);
  if (!drivePeerQueues(ordered, statuses_[0], abort_)) {
    if (connector_.usesNetwork()) proxy::waitForPass();  // no longer in the buffers (send_recv.h, byReference)
    failAborted("send/receive");
  }
}

}  // namespace braid::datapath
