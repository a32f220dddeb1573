#include "bootstrap/root.h"

#include <cstring>
#include <list>
#include <map>
#include <future>
#include <mutex>
#include <thread>

#include <pthread.h>

#include "bootstrap/admission.h"
#include "bootstrap/unique_id.h"
#include "bootstrap/wire.h"
#include "core/log.h"
#include "core/process.h"
#include "core/status.h"
#include <nccl.h>

namespace braid::bootstrap {

std::string describeRanks(const std::vector<int>& ranks, size_t total) {
  total = std::max(total, ranks.size());
  if (ranks.empty()) return "no ranks";
  if (total == 1) return "rank " + std::to_string(ranks[0]);
  std::string s = "ranks ";
  const size_t shown = std::min<size_t>(ranks.size(), 8);
  for (size_t i = 0; i < shown; ++i) {
    if (i > 0) s += (i + 1 == total) ? " and " : ", ";
    s += std::to_string(ranks[i]);
  }
  if (shown < total) s += ", ... (" + std::to_string(total) + " in all)";
  return s;
}

namespace {

/// One communicator's rendezvous.
class Root {
 public:
  Root(net::Socket listening, uint64_t secret, std::chrono::seconds timeout, const std::atomic<bool>* stop)
      : address_(listening.localAddress()),
        listener_(std::move(listening), secret, "root " + address_.toString(), Listener::Replies::kKeep,
                  Listener::rootMessages()),
        secret_(secret),
        commId_(process::random64()),
        sessionKey_(process::random64()),
        timeout_(timeout),
        stop_(stop) {}

  void run() {
    const auto deadline = net::Clock::now() + timeout_;
    while (!stop_->load(std::memory_order_acquire)) {
      if (net::Clock::now() >= deadline) {
        admission_.timeOut("root " + address_.toString(), timeout_);
        replyAll();
        return;
      }
      Message m;
      if (!listener_.poll(100, &m)) continue;
      if (!take(m)) continue;
      if (admission_.failed()) {
        replyAll();
        // Stay a little longer, so ranks that arrive late hear the reason instead of timing out.
        lingerWithError(std::min(deadline, net::Clock::now() + std::chrono::seconds(10)));
        return;
      }
      if (admission_.complete()) {
        if (admission_.rootIndex() == 0) {
          sendTables();
        } else {
          relayThroughFirstRoot(deadline);
        }
        return;
      }
    }
  }

 private:
  /// A registration, or (root 0 of several) another root's block: admitted or refused.
  /// False when the message is neither (ignored).
  bool take(Message& m) {
    const std::string from = m.socket.peerAddress().toString();
    if (m.header.type == MessageType::kRegister && m.payload.size() == sizeof(Registration)) {
      Registration r;
      std::memcpy(&r, m.payload.data(), sizeof(r));
      const int rank = m.header.rank;
      if (admission_.admit(rank, r, from)) {
        sockets_[rank] = std::move(m.socket);
      } else {
        extra_.push_back(std::move(m.socket));
      }
      return true;
    }
    if (m.header.type == MessageType::kBlock && m.payload.size() >= sizeof(BlockHead) &&
        (m.payload.size() - sizeof(BlockHead)) % sizeof(net::SocketAddress::Packed) == 0) {
      BlockHead head;
      std::memcpy(&head, m.payload.data(), sizeof(head));
      std::vector<net::SocketAddress::Packed> addresses((m.payload.size() - sizeof(head)) /
                                                        sizeof(net::SocketAddress::Packed));
      if (!addresses.empty()) {
        std::memcpy(addresses.data(), m.payload.data() + sizeof(head), addresses.size() * sizeof(addresses[0]));
      }
      if (admission_.admitBlock(head, addresses, from)) {
        roots_[head.rootIndex] = std::move(m.socket);
      } else {
        extra_.push_back(std::move(m.socket));
      }
      return true;
    }
    BRAID_WARN_STRANGER("bootstrap: root %s ignored a message of type %#x from %s", address_.toString().c_str(),
                        static_cast<unsigned>(m.header.type), from.c_str());
    return false;
  }

  void reply(net::Socket& s, const std::string& text) { reply(s, text, admission_.errorCode()); }
  void reply(net::Socket& s, const std::string& text, ncclResult_t code) {
    try {
      const uint32_t length = static_cast<uint32_t>(std::min<size_t>(text.size(), kMaxErrorBytes));  // (what ranks take)
      sendMessage(s, secret_, MessageType::kError, -1, static_cast<uint32_t>(code), text.data(), length,
                  net::Clock::now() + std::chrono::seconds(2), nullptr);
    } catch (const std::exception&) {
      // The rank is gone; it cannot be told.
    }
  }

  void replyAll() {
    const std::string& error = admission_.error();
    if (!sockets_.empty() || !extra_.empty()) BRAID_WARN("bootstrap: root %s: %s", address_.toString().c_str(), error.c_str());
    for (auto& [rank, s] : sockets_) reply(s, error);
    for (auto& [index, s] : roots_) reply(s, error);
    for (auto& s : extra_) reply(s, error);
    sockets_.clear();
    roots_.clear();
    extra_.clear();
  }

  void lingerWithError(net::Clock::time_point until) {
    while (net::Clock::now() < until && !stop_->load(std::memory_order_acquire)) {
      Message m;
      if (listener_.poll(100, &m)) reply(m.socket, admission_.error());
    }
  }

  /// The table: TableHead, then every rank's listening address.
  std::vector<char> table(const std::vector<net::SocketAddress::Packed>& addresses) const {
    const TableHead head{commId_, sessionKey_, admission_.nRanks(), 0};
    std::vector<char> bytes(sizeof(head) + addresses.size() * sizeof(net::SocketAddress::Packed));
    std::memcpy(bytes.data(), &head, sizeof(head));
    std::memcpy(bytes.data() + sizeof(head), addresses.data(), addresses.size() * sizeof(net::SocketAddress::Packed));
    return bytes;
  }

  /// Sends `bytes` as the table to every connection in `to` ("rank" or "root" says which, for
  /// the warning when one is gone).
  void sendTable(std::map<int, net::Socket>& to, const char* what, const std::vector<char>& bytes) {
    for (auto& [index, socket] : to) {
      try {
        sendMessage(socket, secret_, MessageType::kTable, -1, 0, bytes.data(), static_cast<uint32_t>(bytes.size()),
                    net::Clock::now() + std::chrono::seconds(30), stop_);
      } catch (const std::exception& e) {
        BRAID_WARN("bootstrap: root %s could not send the table to %s %d: %s", address_.toString().c_str(), what,
                   index, e.what());
      }
    }
  }

  /// Root 0 (or the only root): the table to its ranks and to the other roots, for theirs.
  void sendTables() {
    const std::vector<char> bytes = table(admission_.addresses());
    sendTable(roots_, "the root of unique id", bytes);
    sendTable(sockets_, "rank", bytes);
    BRAID_INFO(log::kBootstrap, "bootstrap: root %s served %d of %d ranks%s", address_.toString().c_str(),
               static_cast<int>(sockets_.size()), admission_.nRanks(),
               admission_.nRoots() > 1 ? (" and " + std::to_string(admission_.nRoots() - 1) + " other roots").c_str() : "");
  }

  /// Root j > 0 of several: sends its block to root 0 and passes root 0's answer (the table,
  /// or why the communicator failed) on to its own ranks.
  void relayThroughFirstRoot(net::Clock::time_point deadline) {
    const net::SocketAddress first = net::SocketAddress::unpack(admission_.firstRoot());
    const RankBlock block = blockOfRoot(admission_.rootIndex(), admission_.nRanks(), admission_.nRoots());
    const BlockHead head{admission_.nRanks(), admission_.nRoots(), admission_.rootIndex(), block.first, block.count, 0};
    const std::vector<net::SocketAddress::Packed> all = admission_.addresses();
    std::vector<char> bytes(sizeof(head) + static_cast<size_t>(block.count) * sizeof(net::SocketAddress::Packed));
    std::memcpy(bytes.data(), &head, sizeof(head));
    std::memcpy(bytes.data() + sizeof(head), all.data() + block.first, block.count * sizeof(net::SocketAddress::Packed));
    Message answer;
    try {
      // (root 0 answers once every root's ranks are there: up to its own deadline)
      const auto until = deadline + std::chrono::seconds(10);
      net::Socket s = net::Socket::connect(first, until, stop_);
      sendMessage(s, admission_.firstRootSecret(), MessageType::kBlock, -1, 0, bytes.data(),
                  static_cast<uint32_t>(bytes.size()), until, stop_);
      const std::string from = "the root of unique id 0 (" + first.toString() + ")";
      answer = receiveMessage(s, admission_.firstRootSecret(), until, stop_, from.c_str());
    } catch (const std::exception& e) {
      passOn("the root of unique id 0 at " + first.toString() + " did not answer the root of unique id " +
             std::to_string(admission_.rootIndex()) + " (" + address_.toString() + "): " + e.what());
      return;
    }
    TableHead table{};
    if (answer.payload.size() >= sizeof(table)) std::memcpy(&table, answer.payload.data(), sizeof(table));
    if (answer.header.type == MessageType::kTable && table.nRanks == admission_.nRanks() &&
        answer.payload.size() == sizeof(table) + static_cast<size_t>(table.nRanks) * sizeof(net::SocketAddress::Packed)) {
      sendTable(sockets_, "rank", answer.payload);
      BRAID_INFO(log::kBootstrap, "bootstrap: root %s (unique id %d of %d) served ranks %d to %d",
                 address_.toString().c_str(), admission_.rootIndex(), admission_.nRoots(), block.first,
                 block.first + block.count - 1);
    } else if (answer.header.type == MessageType::kError) {
      const auto code = static_cast<ncclResult_t>(answer.header.tag);
      passOn(std::string(answer.payload.begin(), answer.payload.end()),
             code > ncclSuccess && code < ncclNumResults ? code : ncclSystemError);
    } else {
      passOn("the root of unique id 0 at " + first.toString() + " sent an unexpected answer");
    }
  }

  /// Tells this root's ranks why the communicator failed (root 0's reason, or its silence).
  void passOn(const std::string& why, ncclResult_t code = ncclSystemError) {
    BRAID_WARN("bootstrap: root %s: %s", address_.toString().c_str(), why.c_str());
    for (auto& [rank, s] : sockets_) reply(s, why, code);
    sockets_.clear();
  }

  net::SocketAddress address_;
  Listener listener_;
  uint64_t secret_;
  uint64_t commId_;      // (both random, never derived from the secret: see TableHead)
  uint64_t sessionKey_;
  std::chrono::seconds timeout_;
  const std::atomic<bool>* stop_;
  Admission admission_;
  std::map<int, net::Socket> sockets_;  // the admitted ranks' connections
  std::map<int, net::Socket> roots_;    // root 0: the other roots' connections, by unique id
  std::vector<net::Socket> extra_;      // refused ones, told the reason
};

class RootRegistry;
RootRegistry& registry();

/// Owns the root threads of this process: joins finished ones, stops the rest at exit.
class RootRegistry {
 public:
  RootRegistry() {
    pthread_atfork(nullptr, nullptr, [] { registry().forgetAfterFork(); });
  }

  ~RootRegistry() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& e : entries_) e.stop.store(true, std::memory_order_release);
    for (auto& e : entries_) e.thread.join();
  }

  /// Stops the root of `ticket` (if it still runs) and joins its thread.
  void stop(uint64_t ticket) {
    std::unique_lock<std::mutex> lock(mutex_);
    // The entry is looked up anew after every wait: another thread may have reaped it (once
    // done) while the lock was let go.
    for (uint32_t spins = 0;; ++spins) {
      Entry* e = nullptr;
      for (auto& candidate : entries_) {
        if (candidate.ticket == ticket) e = &candidate;
      }
      if (e == nullptr) return;  // (finished and reaped already)
      e->stop.store(true, std::memory_order_release);
      if (e->done.load(std::memory_order_acquire)) break;
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::milliseconds(spins < 10 ? 1 : 10));
      lock.lock();
    }
    reapLocked();
  }

  /// Returns once the root's thread has set itself up and waits for ranks: a process that
  /// forks right after (a test harness starting ranks, say) then forks while that thread
  /// allocates nothing, so no allocator lock it held can reach the child locked.
  uint64_t start(net::Socket listening, uint64_t secret, std::chrono::seconds timeout) {
    auto ready = std::make_shared<std::promise<void>>();  // (shared: the thread may outlive this call)
    std::future<void> started = ready->get_future();
    uint64_t ticket = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      reapLocked();
      entries_.emplace_back();
      Entry& e = entries_.back();
      e.ticket = ++tickets_;
      ticket = e.ticket;
      std::atomic<bool>* done = &e.done;
      std::atomic<bool>* stop = &e.stop;
      // (an entry whose thread could not start is dropped again: nothing would ever join it)
      struct DropUnstarted {
        std::list<Entry>& entries;
        bool started = false;
        ~DropUnstarted() {
          if (!started) entries.pop_back();
        }
      } drop{entries_};
      e.thread = std::thread([done, stop, ready, s = std::move(listening), secret, timeout]() mutable {
        bool told = false;
        try {
          Root root(std::move(s), secret, timeout, stop);
          ready->set_value();
          told = true;
          root.run();
        } catch (const std::exception& ex) {
          BRAID_WARN("bootstrap: root failed: %s", ex.what());
        }
        if (!told) ready->set_value();
        done->store(true, std::memory_order_release);
      });
      drop.started = true;
    }
    started.wait();
    return ticket;
  }

  /// In a forked child the root threads do not exist: drop their handles without joining.
  void forgetAfterFork() {
    new (&mutex_) std::mutex();
    new std::list<Entry>(std::move(entries_));  // deliberately leaked: never joined here
    entries_.clear();
  }

  int live() {
    std::lock_guard<std::mutex> lock(mutex_);
    reapLocked();
    return static_cast<int>(entries_.size());
  }

 private:
  struct Entry {
    std::thread thread;
    std::atomic<bool> done{false};
    std::atomic<bool> stop{false};  // raised by stop() or at exit
    uint64_t ticket = 0;
  };

  void reapLocked() {
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (it->done.load(std::memory_order_acquire)) {
        it->thread.join();
        it = entries_.erase(it);
      } else {
        ++it;
      }
    }
  }

  std::mutex mutex_;
  std::list<Entry> entries_;
  uint64_t tickets_ = 0;
};

RootRegistry& registry() {
  static RootRegistry r;
  return r;
}

}  // namespace

uint64_t startRoot(net::Socket listening, uint64_t secret, std::chrono::seconds timeout) {
  return registry().start(std::move(listening), secret, timeout);
}

void stopRoot(uint64_t ticket) { registry().stop(ticket); }

int liveRoots() { return registry().live(); }

}  // namespace braid::bootstrap
