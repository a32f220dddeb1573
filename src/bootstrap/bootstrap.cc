#include "bootstrap/bootstrap.h"

#include <poll.h>

#include <algorithm>
#include <cerrno>
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
  return join(std::vector<UniqueId>{id}, rank, nRanks, settings, abortFlag);
}

std::unique_ptr<Bootstrap> Bootstrap::join(const std::vector<UniqueId>& ids, int rank, int nRanks,
                                           const NetSettings& settings, const std::atomic<bool>* abortFlag) {
  const int nRoots = static_cast<int>(ids.size());
  if (nRoots < 1 || nRanks < 1 || nRoots > nRanks || rank < 0 || rank >= nRanks) {
    fail(ncclInvalidArgument, "bootstrap: rank %d of %d cannot join with %d unique ids", rank, nRanks, nRoots);
  }
  const int rootIndex = rootOfRank(rank, nRanks, nRoots);
  const UniqueId& id = ids[rootIndex];
  net::InterfaceRequest request = settings.interface;
  request.preferSubnetOf = id.root;
  const net::Interface iface = net::chooseInterface(request);
  // (a deep backlog: in an AlltoAll's setup every rank connects to this one at once)
  net::Socket listening = net::Socket::listen(iface.address, 4096);
  const net::SocketAddress mine = listening.localAddress();
  BRAID_INFO(log::kBootstrap | log::kInit, "bootstrap: rank %d listens on %s (interface %s), root %s", rank,
             mine.toString().c_str(), iface.name.c_str(), id.root.toString().c_str());

  std::unique_ptr<Bootstrap> b(
      new Bootstrap(rank, id.secret, Listener(std::move(listening), id.secret, "rank " + std::to_string(rank), Listener::Replies::kClose),
                    settings, abortFlag));

  // Register with the root and wait for the table (or the root's reason for refusing).
  const auto rootDeadline = net::Clock::now() + settings.timeout + kRootGrace;
  Message answer;
  try {
    // A grow id's root ran before the id existed and ends with the grow that uses it: a refusal
    // means it is gone (a late joiner), not that it has yet to start, so it is not retried.
    net::Socket root = net::Socket::connect(id.root, net::Clock::now() + settings.timeout, abortFlag, {},
                                            /*refusedIsFinal=*/id.grownFrom > 0);
    Registration r{};
    r.nRanks = nRanks;
    r.abiVersion = NCCL_VERSION_CODE;
    r.listenAddress = mine.pack();
    std::strncpy(r.braidVersion, BRAID_VERSION, sizeof(r.braidVersion) - 1);
    r.nRoots = nRoots;
    r.rootIndex = rootIndex;
    r.firstRoot = ids[0].root.pack();
    r.firstRootSecret = ids[0].secret;
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
  return b;
}

namespace {
/// A kPeer message of no payload under this tag only asks whether the receiver still listens:
/// receivers drop it.
constexpr uint32_t kProbeTag = 0xffffffffu;
/// Tags of inquiries (no payload) and their answers (kAnswerBytes): serviceInquiries.
constexpr uint32_t kInquiryTag = 0xfffffffeu;
constexpr uint32_t kAnswerTag = 0xfffffffdu;
bool isProbe(const Message& m) {
  return m.header.type == MessageType::kPeer && m.header.tag == kProbeTag && m.header.length == 0;
}
/// A wait on one peer asks it whether it still listens after this long, then at doubling
/// intervals up to kProbeMax: a peer whose communicator was destroyed or aborted (its process
/// alive, so nothing else tells) refuses, and the wait fails naming it instead of waiting out
/// the bootstrap timeout.
constexpr auto kProbeFirst = std::chrono::milliseconds(500);
constexpr auto kProbeMax = std::chrono::seconds(8);
}  // namespace

void Bootstrap::probe(int peer, const std::atomic<bool>* abortFlag, const char* what, uint32_t tag) {
  net::Socket s;
  try {
    s = net::Socket::connect(peers_[peer], net::Clock::now() + std::chrono::milliseconds(500), abortFlag, {},
                             /*refusedIsFinal=*/true);
  } catch (const Error& e) {
    if (e.code() != ncclRemoteError) return;  // slow, or aborted: the wait's own checks decide
    fail(ncclRemoteError, "bootstrap: rank %d waiting for %s (rank %d, tag %u): rank %d at %s no longer listens: its "
         "communicator was destroyed or aborted, or its process exited", rank_, what, peer, tag, peer,
         peers_[peer].toString().c_str());
  }
  const MessageHeader header{secret_, MessageType::kPeer, rank_, kProbeTag, 0};
  (void)s.writeSome(&header, sizeof(header));  // (24 bytes to a new connection: taken whole, or it closed)
}

Message Bootstrap::await(MessageType type, int from, uint32_t tag, const char* what,
                         const std::atomic<bool>* abortFlag) {
  if (abortFlag == nullptr) abortFlag = abortFlag_;
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
  timedOutOn_.store(-1, std::memory_order_relaxed);
  auto probeEvery = std::chrono::duration_cast<net::Clock::duration>(kProbeFirst);
  auto nextProbe = net::Clock::now() + probeEvery;
  for (;;) {
    try {
      net::checkWait(abortFlag, until, "bootstrap");
    } catch (const Error& e) {
      if (e.code() == ncclTimeout) timedOutOn_.store(from, std::memory_order_relaxed);  // (an abort is ncclInvalidUsage)
      fail(e.code(), "bootstrap: rank %d waiting for %s (rank %d, tag %u): %s", rank_, what, from, tag, e.what());
    }
    if (from != rank_ && net::Clock::now() >= nextProbe) {
      probe(from, abortFlag, what, tag);
      probeEvery = std::min<net::Clock::duration>(2 * probeEvery, kProbeMax);
      nextProbe = net::Clock::now() + probeEvery;
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
  m.socket = net::Socket();  // (one connection a message: done)
  if (isProbe(m)) return;
  if (m.header.type == MessageType::kPeer && (m.header.tag == kInquiryTag || m.header.tag == kAnswerTag)) {
    std::lock_guard<std::mutex> lock(inquiryMutex_);
    const int from = m.header.rank;
    if (m.header.tag == kAnswerTag && m.payload.size() == kAnswerBytes) {
      std::memcpy(answers_[from].data(), m.payload.data(), kAnswerBytes);
    } else if (m.header.tag == kInquiryTag && m.payload.empty() &&
               std::find(askedBy_.begin(), askedBy_.end(), from) == askedBy_.end()) {
      askedBy_.push_back(from);  // (one entry a rank: bounded by nranks)
    }
    return;
  }
  if (unexpected_.size() >= maxUnexpected_ || unexpectedBytes_ + m.payload.size() > maxUnexpectedBytes_) {
    fail(ncclSystemError, "bootstrap: rank %d holds %zu messages (%zu bytes) that nothing waits for yet; rank %d's "
         "message (tag %u, %zu bytes) is one too many: do all ranks make the same calls in the same order?",
         rank_, unexpected_.size(), unexpectedBytes_, m.header.rank, m.header.tag, m.payload.size());
  }
  unexpectedBytes_ += m.payload.size();
  unexpected_.push_back(std::move(m));
}

void Bootstrap::setAnswerer(std::function<Answer(int asker)> answerer) {
  std::lock_guard<std::mutex> lock(inquiryMutex_);
  answerer_ = std::move(answerer);
}

void Bootstrap::serviceInquiries() {
  {
    std::unique_lock<std::mutex> lock(listenMutex_, std::try_to_lock);  // (a thread in await files them itself)
    Message m;
    while (lock.owns_lock() && listener_.poll(0, &m)) {
      if (m.header.rank >= 0 && m.header.rank < nRanks()) queueUnexpected(std::move(m));
    }
  }
  std::vector<std::pair<int, Answer>> answers;
  {
    std::lock_guard<std::mutex> lock(inquiryMutex_);
    if (!answerer_) askedBy_.clear();
    for (const int peer : askedBy_) answers.emplace_back(peer, answerer_(peer));
    askedBy_.clear();
  }
  for (const auto& [peer, answer] : answers) (void)note(peer, kAnswerTag, answer.data(), answer.size());
}

bool Bootstrap::inquire(int peer) { return note(peer, kInquiryTag, nullptr, 0); }

bool Bootstrap::takeAnswer(int peer, Answer* out) {
  std::lock_guard<std::mutex> lock(inquiryMutex_);
  const auto it = answers_.find(peer);
  if (it == answers_.end()) return false;
  *out = it->second;
  answers_.erase(it);
  return true;
}

bool Bootstrap::note(int peer, uint32_t tag, const void* data, size_t size) {
  if (peer < 0 || peer >= nRanks() || peer == rank_) return false;
  char bytes[sizeof(MessageHeader) + kAnswerBytes];
  if (size > kAnswerBytes) return false;
  const MessageHeader header{secret_, MessageType::kPeer, rank_, tag, static_cast<uint32_t>(size)};
  std::memcpy(bytes, &header, sizeof header);
  if (size > 0) std::memcpy(bytes + sizeof header, data, size);
  try {
    net::Socket s = net::Socket::connect(peers_[peer], net::Clock::now() + std::chrono::milliseconds(500), abortFlag_, {},
                                         /*refusedIsFinal=*/true);
    // (under 100 bytes to a new connection: taken whole, or it closed)
    return s.writeSome(bytes, sizeof header + size) == static_cast<ssize_t>(sizeof header + size);
  } catch (const Error&) {
    return false;  // gone, or not reachable now: the asker finds out otherwise
  }
}

namespace {
/// A round's tag: the collective's number on this communicator and the round within it
/// (fewer than 2^kRoundBits rounds: nranks < 2^31).
constexpr uint32_t kRoundBits = 5;
uint32_t roundTag(uint32_t collective, int round) {
  return (collective << kRoundBits) | static_cast<uint32_t>(round);
}
}  // namespace

void Bootstrap::post(int peer, MessageType type, uint32_t tag, const void* data, size_t size,
                     const std::atomic<bool>* abortFlag) {
  if (abortFlag == nullptr) abortFlag = abortFlag_;
  if (size > kMaxPayloadBytes) {
    fail(ncclInternalError, "bootstrap: rank %d would send %zu bytes to rank %d, more than a message's %u", rank_,
         size, peer, kMaxPayloadBytes);
  }
  std::vector<char> bytes(sizeof(MessageHeader) + size);
  const MessageHeader header{secret_, type, rank_, tag, static_cast<uint32_t>(size)};
  std::memcpy(bytes.data(), &header, sizeof(header));
  if (size > 0) std::memcpy(bytes.data() + sizeof(header), data, size);
  // While the connection or the receiver's buffers wait, read what comes for this rank (the
  // receiver may itself be sending to it, or connecting to a rank that waits on this one);
  // when another thread of this rank waits in await, that thread reads them.
  auto readOwnMail = [this] {
    std::unique_lock<std::mutex> lock(listenMutex_, std::try_to_lock);
    if (!lock.owns_lock()) return;
    Message m;
    while (listener_.poll(0, &m)) {
      if (m.header.rank >= 0 && m.header.rank < nRanks()) queueUnexpected(std::move(m));
    }
  };
  const auto until = deadline();
  net::Socket s;
  try {  // (every rank listened before any had the table: a refusal now means this one stopped)
    s = net::Socket::connect(peers_[peer], until, abortFlag, readOwnMail, /*refusedIsFinal=*/true);
  } catch (const Error& e) {
    if (e.code() != ncclRemoteError) throw;
    fail(ncclRemoteError, "rank %d no longer listens: its communicator was destroyed or aborted, or its process "
         "exited (%s)", peer, e.what());
  }
  for (size_t sent = 0; sent < bytes.size();) {
    const ssize_t n = s.writeSome(bytes.data() + sent, bytes.size() - sent);
    if (n < 0) fail(ncclRemoteError, "the connection broke after %zu of %zu bytes: %s", sent, bytes.size(), strerror(errno));
    sent += static_cast<size_t>(n);
    if (sent == bytes.size()) break;
    net::checkWait(abortFlag, until, "a bootstrap send");
    readOwnMail();
    pollfd writable{s.fd(), POLLOUT, 0};
    ::poll(&writable, 1, 1);
  }
}

void Bootstrap::round(int to, int from, uint32_t tag, const void* sendData, size_t sendSize, void* recvData,
                      size_t recvSize) {
  {
    const WaitingOn waiting(waitingOn_, to);
    try {
      post(to, MessageType::kRound, tag, sendData, sendSize);
    } catch (const Error& e) {
      fail(e.code(), "bootstrap: rank %d could not send to rank %d at %s (did rank %d die?): %s", rank_, to,
           peers_[to].toString().c_str(), to, e.what());
    }
  }
  const WaitingOn waiting(waitingOn_, from);
  const Message m = await(MessageType::kRound, from, tag, "its part of an allgather, alltoall or barrier");
  if (m.payload.size() != recvSize) {
    fail(ncclInternalError, "bootstrap: rank %d sent %zu bytes in a round of a bootstrap collective but rank %d expected %zu "
         "(do all ranks call with the same size?)", from, m.payload.size(), rank_, recvSize);
  }
  if (recvSize > 0) std::memcpy(recvData, m.payload.data(), recvSize);
}

void Bootstrap::allGather(void* data, size_t bytesPerRank) {
  std::lock_guard<std::mutex> lock(collectiveMutex_);
  const int n = nRanks();
  const uint32_t collective = collectives_++;
  if (n == 1) return;
  // Block i of `blocks` holds rank (rank_ + i) % n's slot; after round k the first 2^(k+1).
  std::vector<char> blocks(static_cast<size_t>(n) * bytesPerRank);
  char* slots = static_cast<char*>(data);
  std::memcpy(blocks.data(), slots + static_cast<size_t>(rank_) * bytesPerRank, bytesPerRank);
  int k = 0;
  for (int have = 1; have < n; have *= 2, ++k) {
    const size_t bytes = static_cast<size_t>(std::min(have, n - have)) * bytesPerRank;
    round((rank_ - have + n) % n, (rank_ + have) % n, roundTag(collective, k), blocks.data(), bytes,
          blocks.data() + static_cast<size_t>(have) * bytesPerRank, bytes);
  }
  for (int i = 1; i < n; ++i) {
    std::memcpy(slots + static_cast<size_t>((rank_ + i) % n) * bytesPerRank,
                blocks.data() + static_cast<size_t>(i) * bytesPerRank, bytesPerRank);
  }
}

void Bootstrap::allToAll(const void* sendData, void* recvData, size_t bytesPerRank) {
  std::lock_guard<std::mutex> lock(collectiveMutex_);
  const int n = nRanks();
  const uint32_t collective = collectives_++;
  const char* in = static_cast<const char*>(sendData);
  char* out = static_cast<char*>(recvData);
  // Block i of `blocks` starts as the one for rank (rank_ + i) % n; after the rounds it holds
  // the one from rank (rank_ - i) % n: each round moves the blocks whose index has bit d set
  // d ranks on, and every index is the sum of its bits.
  std::vector<char> blocks(static_cast<size_t>(n) * bytesPerRank);
  for (int i = 0; i < n; ++i) {
    std::memcpy(blocks.data() + static_cast<size_t>(i) * bytesPerRank,
                in + static_cast<size_t>((rank_ + i) % n) * bytesPerRank, bytesPerRank);
  }
  std::vector<char> packed, arrived;
  int k = 0;
  for (int d = 1; d < n; d *= 2, ++k) {
    packed.clear();
    for (int i = d; i < n; ++i) {
      if (i & d) packed.insert(packed.end(), blocks.begin() + i * bytesPerRank, blocks.begin() + (i + 1) * bytesPerRank);
    }
    arrived.resize(packed.size());
    round((rank_ + d) % n, (rank_ - d + n) % n, roundTag(collective, k), packed.data(), packed.size(), arrived.data(),
          arrived.size());
    size_t at = 0;
    for (int i = d; i < n; ++i) {
      if (!(i & d)) continue;
      std::memcpy(blocks.data() + static_cast<size_t>(i) * bytesPerRank, arrived.data() + at, bytesPerRank);
      at += bytesPerRank;
    }
  }
  for (int i = 0; i < n; ++i) {
    std::memcpy(out + static_cast<size_t>((rank_ - i + n) % n) * bytesPerRank,
                blocks.data() + static_cast<size_t>(i) * bytesPerRank, bytesPerRank);
  }
}

void Bootstrap::barrier() {
  std::lock_guard<std::mutex> lock(collectiveMutex_);
  const int n = nRanks();
  const uint32_t collective = collectives_++;
  int k = 0;
  for (int step = 1; step < n; step *= 2, ++k) {
    round((rank_ + step) % n, (rank_ - step + n) % n, roundTag(collective, k), nullptr, 0, nullptr, 0);
  }
}

void Bootstrap::send(int peer, uint32_t tag, const void* data, size_t size, const std::atomic<bool>* abortFlag) {
  if (peer < 0 || peer >= nRanks()) fail(ncclInternalError, "bootstrap send to rank %d of %d", peer, nRanks());
  const WaitingOn waiting(waitingOn_, peer);
  try {
    post(peer, MessageType::kPeer, tag, data, size, abortFlag);
  } catch (const Error& e) {
    fail(e.code(), "bootstrap: rank %d could not send to rank %d (%s): %s", rank_, peer,
         peers_[peer].toString().c_str(), e.what());
  }
}
void Bootstrap::recv(int peer, uint32_t tag, void* data, size_t size, const std::atomic<bool>* abortFlag) {
  const WaitingOn waiting(waitingOn_, peer);
  Message m = await(MessageType::kPeer, peer, tag, "a message", abortFlag);
  if (m.payload.size() != size) {
    fail(ncclInternalError, "bootstrap: rank %d sent %zu bytes under tag %u but rank %d expected %zu", peer,
         m.payload.size(), tag, rank_, size);
  }
  std::memcpy(data, m.payload.data(), size);
}

}  // namespace braid::bootstrap
