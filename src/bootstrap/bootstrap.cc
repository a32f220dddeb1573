#include "bootstrap/bootstrap.h"

#include <cstring>

#include "braid_config.h"
#include "core/log.h"
#include "core/status.h"

namespace braid::bootstrap {

namespace {
/// How much longer than the root's own deadline a rank waits for the root's answer.
constexpr auto kRootGrace = std::chrono::seconds(10);

/// Records the peer a wait is on for its duration (Bootstrap::waitingOn).
class WaitingOn {
 public:
  WaitingOn(std::atomic<int>& slot, int peer) : slot_(slot) { slot_.store(peer, std::memory_order_relaxed); }
  ~WaitingOn() { slot_.store(-1, std::memory_order_relaxed); }
  WaitingOn(const WaitingOn&) = delete;
  WaitingOn& operator=(const WaitingOn&) = delete;

 private:
  std::atomic<int>& slot_;
};
}  // namespace

Bootstrap::Bootstrap(int rank, uint64_t secret, Listener listener, const NetSettings& settings,
                     const std::atomic<bool>* abortFlag)
    : rank_(rank),
      secret_(secret),
      timeout_(settings.timeout),
      abortFlag_(abortFlag),
      listener_(std::move(listener)) {}

std::unique_ptr<Bootstrap> Bootstrap::join(const UniqueId& id, int rank, int nRanks, const NetSettings& settings,
                                           const std::atomic<bool>* abortFlag) {
  net::InterfaceRequest request = settings.interface;
  request.preferSubnetOf = id.root;
  const net::Interface iface = net::chooseInterface(request);
  net::Socket listening = net::Socket::listen(iface.address);
  const net::SocketAddress mine = listening.localAddress();
  BRAID_INFO(log::kBootstrap | log::kInit, "bootstrap: rank %d listens on %s (interface %s), root %s", rank,
             mine.toString().c_str(), iface.name.c_str(), id.root.toString().c_str());

  std::unique_ptr<Bootstrap> b(
      new Bootstrap(rank, id.secret, Listener(std::move(listening), id.secret, "rank " + std::to_string(rank)),
                    settings, abortFlag));

  // Register with the root and wait for the table (or the root's reason for refusing).
  const auto rootDeadline = net::Clock::now() + settings.timeout + kRootGrace;
  Message answer;
  try {
    net::Socket root = net::Socket::connect(id.root, net::Clock::now() + settings.timeout, abortFlag);
    Registration r{};
    r.nRanks = nRanks;
    r.abiVersion = NCCL_VERSION_CODE;
    r.listenAddress = mine.pack();
    std::strncpy(r.braidVersion, BRAID_VERSION, sizeof(r.braidVersion) - 1);
    sendMessage(root, id.secret, MessageType::kRegister, rank, 0, &r, sizeof(r), rootDeadline, abortFlag);
    const std::string from = "root " + id.root.toString();
    answer = receiveMessage(root, id.secret, rootDeadline, abortFlag, from.c_str());
  } catch (const Error& e) {
    fail(e.code(), "bootstrap: rank %d of %d could not rendezvous at root %s: %s", rank, nRanks,
         id.root.toString().c_str(), e.what());
  }
  if (answer.header.type == MessageType::kError) {
    const std::string reason(answer.payload.begin(), answer.payload.end());
    const auto code = static_cast<ncclResult_t>(answer.header.tag);
    fail(code == ncclSuccess ? ncclSystemError : code, "bootstrap: %s", reason.c_str());
  }
  TableHead head{};
  if (answer.payload.size() >= sizeof(head)) std::memcpy(&head, answer.payload.data(), sizeof(head));
  if (answer.header.type != MessageType::kTable || head.nRanks != nRanks ||
      answer.payload.size() != sizeof(head) + static_cast<size_t>(nRanks) * sizeof(net::SocketAddress::Packed)) {
    fail(ncclSystemError, "bootstrap: the root %s sent an unexpected answer (type %#x, %zu bytes, %d ranks)",
         id.root.toString().c_str(), static_cast<unsigned>(answer.header.type), answer.payload.size(), head.nRanks);
  }
  b->peers_.resize(nRanks);
  b->maxUnexpected_ = 4096 + 64 * static_cast<size_t>(nRanks);
  for (int r = 0; r < nRanks; ++r) {
    net::SocketAddress::Packed p;
    std::memcpy(&p, answer.payload.data() + sizeof(head) + r * sizeof(p), sizeof(p));
    b->peers_[r] = net::SocketAddress::unpack(p);
  }
  // From here on the ranks talk with the root's session key (wire.h).
  b->commId_ = head.commId;
  b->secret_ = head.sessionKey;
  b->listener_.rekey(head.sessionKey);
  b->formRing();
  return b;
}

void Bootstrap::formRing() {
  if (nRanks() == 1) return;
  const int next = (rank_ + 1) % nRanks();
  const int prev = (rank_ + nRanks() - 1) % nRanks();
  try {
    next_ = net::Socket::connect(peers_[next], deadline(), abortFlag_);
    sendMessage(next_, secret_, MessageType::kRing, rank_, 0, nullptr, 0, deadline(), abortFlag_);
  } catch (const Error& e) {
    fail(e.code(), "bootstrap: rank %d could not link the ring to rank %d at %s (did rank %d die during init?): %s",
         rank_, next, peers_[next].toString().c_str(), next, e.what());
  }
  prev_ = std::move(await(MessageType::kRing, prev, 0, "the ring link from the previous rank").socket);
}

Message Bootstrap::await(MessageType type, int from, uint32_t tag, const char* what) {
  std::lock_guard<std::mutex> lock(listenMutex_);
  auto matches = [&](const Message& m) {
    return m.header.type == type && m.header.rank == from && m.header.tag == tag;
  };
  for (auto it = unexpected_.begin(); it != unexpected_.end(); ++it) {
    if (matches(*it)) {
      Message m = std::move(*it);
      unexpected_.erase(it);
      unexpectedBytes_ -= m.payload.size();
      return m;
    }
  }
  const auto until = deadline();
  for (;;) {
    try {
      net::checkWait(abortFlag_, until, "bootstrap");
    } catch (const Error& e) {
      fail(e.code(), "bootstrap: rank %d waiting for %s (rank %d, tag %u): %s", rank_, what, from, tag, e.what());
    }
    Message m;
    if (!listener_.poll(50, &m)) continue;
    if (m.header.rank < 0 || m.header.rank >= nRanks()) {
      BRAID_WARN("bootstrap: rank %d dropped a message claiming to come from rank %d", rank_, m.header.rank);
      continue;
    }
    if (matches(m)) return m;
    queueUnexpected(std::move(m));
  }
}

void Bootstrap::queueUnexpected(Message m) {
  if (m.header.type != MessageType::kRing) m.socket = net::Socket();  // (one connection a message: done)
  if (unexpected_.size() >= maxUnexpected_ || unexpectedBytes_ + m.payload.size() > maxUnexpectedBytes_) {
    fail(ncclSystemError, "bootstrap: rank %d holds %zu messages (%zu bytes) that nothing waits for yet; rank %d's "
         "message (tag %u, %zu bytes) is one too many: do all ranks make the same calls in the same order?",
         rank_, unexpected_.size(), unexpectedBytes_, m.header.rank, m.header.tag, m.payload.size());
  }
  unexpectedBytes_ += m.payload.size();
  unexpected_.push_back(std::move(m));
}

void Bootstrap::allGather(void* data, size_t bytesPerRank) {
  std::lock_guard<std::mutex> lock(ringMutex_);
  const int n = nRanks();
  char* slots = static_cast<char*>(data);
  try {
    for (int step = 0; step < n - 1; ++step) {
      const int sendSlot = (rank_ - step + n) % n;
      const int recvSlot = (rank_ - step - 1 + 2 * n) % n;
      net::exchange(next_, slots + sendSlot * bytesPerRank, bytesPerRank, prev_, slots + recvSlot * bytesPerRank,
                    bytesPerRank, deadline(), abortFlag_);
    }
  } catch (const Error& e) {
    fail(e.code(), "bootstrap: rank %d allgather over the ring failed: %s", rank_, e.what());
  }
}

void Bootstrap::barrier() {
  std::vector<char> token(nRanks());
  allGather(token.data(), 1);
}

void Bootstrap::send(int peer, uint32_t tag, const void* data, size_t size) {
  if (peer < 0 || peer >= nRanks()) fail(ncclInternalError, "bootstrap send to rank %d of %d", peer, nRanks());
  if (size > kMaxPayloadBytes) fail(ncclInternalError, "bootstrap message of %zu bytes is too large", size);
  const WaitingOn waiting(waitingOn_, peer);
  try {
    net::Socket s = net::Socket::connect(peers_[peer], deadline(), abortFlag_);
    sendMessage(s, secret_, MessageType::kPeer, rank_, tag, data, static_cast<uint32_t>(size), deadline(),
                abortFlag_);
  } catch (const Error& e) {
    fail(e.code(), "bootstrap: rank %d could not send to rank %d (%s): %s", rank_, peer,
         peers_[peer].toString().c_str(), e.what());
  }
}

void Bootstrap::recv(int peer, uint32_t tag, void* data, size_t size) {
  const WaitingOn waiting(waitingOn_, peer);
  Message m = await(MessageType::kPeer, peer, tag, "a message");
  if (m.payload.size() != size) {
    fail(ncclInternalError, "bootstrap: rank %d sent %zu bytes under tag %u but rank %d expected %zu", peer,
         m.payload.size(), tag, rank_, size);
  }
  std::memcpy(data, m.payload.data(), size);
}

}  // namespace braid::bootstrap
