#include "bootstrap/wire.h"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/log.h"
#include "core/status.h"

namespace braid::bootstrap {

namespace {

/// How long an accepted connection may take to deliver its first message.
constexpr auto kFirstMessageTime = std::chrono::seconds(10);
/// How many closed strangers' connections a listener logs.
constexpr int kStrangerWarnings = 16;
/// How long a connection may stay silent (not even the key) before a newcomer may take its place.
constexpr auto kEvictAfter = std::chrono::milliseconds(1000);
/// How long accepting pauses when the process has no descriptor left.
constexpr auto kAcceptPause = std::chrono::milliseconds(100);

bool knownType(MessageType t) { return maxPayload(t) > 0 || t == MessageType::kRegister; }

}  // namespace

uint32_t maxPayload(MessageType type) {
  constexpr uint32_t kAddress = sizeof(net::SocketAddress::Packed);
  switch (type) {
    case MessageType::kRegister: return sizeof(Registration);
    case MessageType::kTable: return sizeof(TableHead) + static_cast<uint32_t>(kMaxRanks) * kAddress;
    case MessageType::kError: return kMaxErrorBytes;
    case MessageType::kBlock:  // (root j > 0 of at least two serves at most half the ranks, rounded up)
      return sizeof(BlockHead) + static_cast<uint32_t>(kMaxRanks / 2 + 1) * kAddress;
    case MessageType::kRound:
    case MessageType::kPeer: return kMaxPayloadBytes;
  }
  return 0;
}

size_t payloadGrowth(size_t received) { return std::clamp<size_t>(received, kFreePayloadBytes, size_t(4) << 20); }

RankBlock blockOfRoot(int root, int nRanks, int nRoots) {
  const int base = nRanks / nRoots, extra = nRanks % nRoots;
  return {root * base + std::min(root, extra), base + (root < extra ? 1 : 0)};
}

int rootOfRank(int rank, int nRanks, int nRoots) {
  const int base = nRanks / nRoots, extra = nRanks % nRoots;
  const int big = extra * (base + 1);  // (the ranks of the roots that serve one more)
  return rank < big ? rank / (base + 1) : extra + (rank - big) / base;
}

void sendMessage(net::Socket& socket, uint64_t secret, MessageType type, int rank, uint32_t tag,
                 const void* payload, uint32_t length, net::Clock::time_point deadline,
                 const std::atomic<bool>* abortFlag) {
  std::vector<char> buffer(sizeof(MessageHeader) + length);
  const MessageHeader header{secret, type, rank, tag, length};
  std::memcpy(buffer.data(), &header, sizeof(header));
  if (length > 0) std::memcpy(buffer.data() + sizeof(header), payload, length);
  socket.sendAll(buffer.data(), buffer.size(), deadline, abortFlag);
}

Message receiveMessage(net::Socket& socket, uint64_t secret, net::Clock::time_point deadline,
                       const std::atomic<bool>* abortFlag, const char* from) {
  Message m;
  socket.recvAll(&m.header, sizeof(m.header), deadline, abortFlag);
  if (m.header.secret != secret || !knownType(m.header.type)) {
    fail(ncclSystemError, "bootstrap: %s sent a message without this communicator's secret", from);
  }
  if (m.header.length > maxPayload(m.header.type)) {
    fail(ncclSystemError, "bootstrap: %s announced a message of type %#x with %u bytes, more than the %u it can carry",
         from, static_cast<unsigned>(m.header.type), m.header.length, maxPayload(m.header.type));
  }
  // (grown as the bytes come: an announced length alone reserves nothing)
  for (size_t got = 0; got < m.header.length;) {
    const size_t next = std::min<size_t>(m.header.length, got + payloadGrowth(got));
    m.payload.reserve(next);
    m.payload.resize(next);
    socket.recvAll(m.payload.data() + got, next - got, deadline, abortFlag);
    got = next;
  }
  return m;
}

Listener::Listener(net::Socket listening, uint64_t secret, std::string owner, Replies replies, Accepts accepts)
    : listening_(std::move(listening)),
      secret_(secret),
      owner_(std::move(owner)),
      replies_(replies),
      accepts_(std::move(accepts)) {}

size_t Listener::heldBytes() const {
  size_t held = 0;
  for (const Pending& p : pending_) held += p.payload.capacity();
  return held;
}

bool Listener::advance(Pending& p, bool exempt, size_t* held) {
  while (p.headerBytes < sizeof(MessageHeader)) {
    const ssize_t n = p.socket.readSome(reinterpret_cast<char*>(&p.header) + p.headerBytes,
                                        sizeof(MessageHeader) - p.headerBytes);
    if (n < 0) throw std::runtime_error("closed before sending a complete header");
    if (n == 0) return false;
    p.headerBytes += static_cast<size_t>(n);
    if (p.headerBytes >= sizeof(p.header.secret) && p.header.secret != secret_) {
      throw std::runtime_error("did not start with this communicator's secret");
    }
  }
  if (!p.sized) {
    if (!knownType(p.header.type)) throw std::runtime_error("sent an unknown message type");
    if (std::find(accepts_.begin(), accepts_.end(), p.header.type) == accepts_.end()) {
      throw std::runtime_error("sent a message of a type this listener does not take");
    }
    if (p.header.length > maxPayload(p.header.type)) {
      throw std::runtime_error("announced " + std::to_string(p.header.length) + " bytes, more than its type carries (" +
                               std::to_string(maxPayload(p.header.type)) + ")");
    }
    p.sized = true;
  }
  p.waitsForRoom = false;
  while (p.payloadBytes < p.header.length) {
    if (p.payloadBytes == p.payload.size()) {
      // Room for what comes next only: the buffer follows the bytes, never the announcement.
      const size_t next = std::min<size_t>(p.header.length, p.payloadBytes + payloadGrowth(p.payloadBytes));
      const size_t more = next - p.payload.capacity();
      if (!exempt && next > kFreePayloadBytes && *held + more > kPendingBudget) {
        p.waitsForRoom = true;
        return false;
      }
      p.payload.reserve(next);  // (exactly: resize alone may double the capacity)
      p.payload.resize(next);
      *held += more;
    }
    const ssize_t n = p.socket.readSome(p.payload.data() + p.payloadBytes, p.payload.size() - p.payloadBytes);
    if (n < 0) throw std::runtime_error("closed in the middle of a message");
    if (n == 0) return false;
    p.payloadBytes += static_cast<size_t>(n);
  }
  return true;
}

long Listener::evictable(net::Clock::time_point now) const {
  for (size_t i = 0; i < pending_.size(); ++i) {
    const Pending& p = pending_[i];
    if (!p.complete && p.headerBytes < sizeof(p.header.secret) && now - p.accepted >= kEvictAfter) {
      return static_cast<long>(i);
    }
  }
  return -1;
}

void Listener::acceptAll() {
  const auto now = net::Clock::now();
  full_ = false;
  if (now < acceptPausedUntil_) return;
  for (;;) {
    if (pending_.size() >= kMaxPending) {
      const long victim = evictable(now);
      if (victim < 0) {
        full_ = true;  // (the kernel's backlog holds the rest until these are read)
        return;
      }
      if (!evictionWarned_) {
        BRAID_WARN_STRANGER("bootstrap: %s has %zu connections waiting for a first message; closing those silent "
                            "for %lld ms to take new ones", owner_.c_str(), pending_.size(),
                            static_cast<long long>(kEvictAfter.count()));
        evictionWarned_ = true;
      }
      pending_.erase(pending_.begin() + victim);
    }
    int error = 0;
    net::Socket s = listening_.tryAccept(&error);
    if (!s.valid()) {
      if (error == EMFILE || error == ENFILE) {
        // Out of descriptors: pause accepting (poll would find the listening socket readable
        // at once and spin), and free a silent stranger's descriptor if there is one.
        if (!exhaustionWarned_) {
          BRAID_WARN_STRANGER("bootstrap: %s cannot accept connections: %s (%zu connections wait for a first "
                              "message); pausing %lld ms each time", owner_.c_str(), strerror(error),
                              pending_.size(), static_cast<long long>(kAcceptPause.count()));
          exhaustionWarned_ = true;
        }
        const long victim = evictable(now);
        if (victim >= 0) pending_.erase(pending_.begin() + victim);
        acceptPausedUntil_ = now + kAcceptPause;
      }
      return;
    }
    Pending p;
    p.socket = std::move(s);
    p.accepted = now;
    p.deadline = now + kFirstMessageTime;
    pending_.push_back(std::move(p));
  }
}

void Listener::advanceAll() {
  const auto now = net::Clock::now();
  size_t held = heldBytes();
  bool exemptTaken = false;  // (the first connection in accept order whose message is under way)
  for (size_t i = 0; i < pending_.size();) {
    Pending& p = pending_[i];
    std::string problem;
    try {
      if (!p.complete) {
        p.complete = advance(p, !exemptTaken, &held);
        if (!p.complete && p.sized) exemptTaken = true;
        if (p.complete && replies_ == Replies::kClose) p.socket.close();
      }
      if (!p.complete && now >= p.deadline) problem = "sent no complete message in time";
    } catch (const std::exception& e) {
      problem = e.what();
    }
    if (problem.empty()) {
      ++i;
      continue;
    }
    if (++strangerWarnings_ <= kStrangerWarnings) {
      BRAID_WARN_STRANGER("bootstrap: %s closed a connection from %s that %s%s", owner_.c_str(),
                          p.socket.peerAddress().toString().c_str(), problem.c_str(),
                          strangerWarnings_ == kStrangerWarnings ? " (further ones are not logged)" : "");
    }
    pending_.erase(pending_.begin() + static_cast<long>(i));
  }
}

bool Listener::poll(int timeoutMs, Message* out) {
  const auto until = net::Clock::now() + std::chrono::milliseconds(timeoutMs);
  for (;;) {
    // Every connection is read on every pass (one message is returned a call; the others
    // wait, complete, for the next), so a real peer's key is seen long before eviction.
    acceptAll();
    advanceAll();
    for (size_t i = 0; i < pending_.size(); ++i) {
      Pending& p = pending_[i];
      if (!p.complete) continue;
      out->header = p.header;
      out->payload = std::move(p.payload);
      out->socket = std::move(p.socket);
      pending_.erase(pending_.begin() + static_cast<long>(i));
      return true;
    }
    const auto now = net::Clock::now();
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - now).count();
    if (left <= 0) return false;
    // (a member, kept: an idle root's thread allocates nothing, so a process forking beside it
    // does not copy an allocator lock it held)
    pollFds_.clear();
    const bool accepting = now >= acceptPausedUntil_ && !full_;
    pollFds_.push_back({listening_.fd(), static_cast<short>(accepting ? POLLIN : 0), 0});
    // (one waiting for room is left out: its data, or a hang-up, would wake poll at once, again and again)
    for (const auto& p : pending_) {
      if (!p.waitsForRoom) pollFds_.push_back({p.socket.fd(), POLLIN, 0});
    }
    ::poll(pollFds_.data(), pollFds_.size(), static_cast<int>(std::min<long long>(left, 50)));
  }
}

}  // namespace braid::bootstrap
