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
        listener_(std::move(listening), secret, "root " + address_.toString()),
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
      if (m.header.type != MessageType::kRegister || m.payload.size() != sizeof(Registration)) {
        BRAID_WARN_STRANGER("bootstrap: root %s ignored a message of type %#x from %s", address_.toString().c_str(),
                            static_cast<unsigned>(m.header.type), m.socket.peerAddress().toString().c_str());
        continue;
      }
      Registration r;
      std::memcpy(&r, m.payload.data(), sizeof(r));
      const int rank = m.header.rank;
      if (admission_.admit(rank, r, m.socket.peerAddress().toString())) {
        sockets_[rank] = std::move(m.socket);
      } else {
        extra_.push_back(std::move(m.socket));
      }
      if (admission_.failed()) {
        replyAll();
        // Stay a little longer, so ranks that arrive late hear the reason instead of timing out.
        lingerWithError(std::min(deadline, net::Clock::now() + std::chrono::seconds(10)));
        return;
      }
      if (admission_.complete()) {
        sendTables();
        return;
      }
    }
  }

 private:
  void reply(net::Socket& s, const std::string& text) {
    try {
      sendMessage(s, secret_, MessageType::kError, -1, static_cast<uint32_t>(admission_.errorCode()), text.data(),
                  static_cast<uint32_t>(text.size()), net::Clock::now() + std::chrono::seconds(2), nullptr);
    } catch (const std::exception&) {
      // The rank is gone; it cannot be told.
    }
  }

  void replyAll() {
    const std::string& error = admission_.error();
    if (!sockets_.empty() || !extra_.empty()) BRAID_WARN("bootstrap: root %s: %s", address_.toString().c_str(), error.c_str());
    for (auto& [rank, s] : sockets_) reply(s, error);
    for (auto& s : extra_) reply(s, error);
    sockets_.clear();
    extra_.clear();
  }

  void lingerWithError(net::Clock::time_point until) {
    while (net::Clock::now() < until && !stop_->load(std::memory_order_acquire)) {
      Message m;
      if (listener_.poll(100, &m)) reply(m.socket, admission_.error());
    }
  }

  void sendTables() {
    const int nRanks = admission_.nRanks();
    const TableHead head{commId_, sessionKey_, nRanks, 0};
    std::vector<char> table(sizeof(head) + static_cast<size_t>(nRanks) * sizeof(net::SocketAddress::Packed));
    std::memcpy(table.data(), &head, sizeof(head));
    for (const auto& [rank, r] : admission_.admitted()) {
      std::memcpy(table.data() + sizeof(head) + static_cast<size_t>(rank) * sizeof(net::SocketAddress::Packed),
                  &r.listenAddress, sizeof(net::SocketAddress::Packed));
    }
    const uint32_t bytes = static_cast<uint32_t>(table.size());
    for (auto& [rank, socket] : sockets_) {
      try {
        sendMessage(socket, secret_, MessageType::kTable, -1, 0, table.data(), bytes,
                    net::Clock::now() + std::chrono::seconds(30), stop_);
      } catch (const std::exception& e) {
        BRAID_WARN("bootstrap: root %s could not send the table to rank %d: %s", address_.toString().c_str(), rank,
                   e.what());
      }
    }
    BRAID_INFO(log::kBootstrap, "bootstrap: root %s served %d ranks", address_.toString().c_str(), nRanks);
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
    stop_.store(true, std::memory_order_release);
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& e : entries_) e.thread.join();
  }

  /// Returns once the root's thread has set itself up and waits for ranks: a process that
  /// forks right after (a test harness starting ranks, say) then forks while that thread
  /// allocates nothing, so no allocator lock it held can reach the child locked.
  void start(net::Socket listening, uint64_t secret, std::chrono::seconds timeout) {
    auto ready = std::make_shared<std::promise<void>>();  // (shared: the thread may outlive this call)
    std::future<void> started = ready->get_future();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      reapLocked();
      entries_.emplace_back();
      Entry& e = entries_.back();
      std::atomic<bool>* done = &e.done;
      // (an entry whose thread could not start is dropped again: nothing would ever join it)
      struct DropUnstarted {
        std::list<Entry>& entries;
        bool started = false;
        ~DropUnstarted() {
          if (!started) entries.pop_back();
        }
      } drop{entries_};
      e.thread = std::thread([this, done, ready, s = std::move(listening), secret, timeout]() mutable {
        bool told = false;
        try {
          Root root(std::move(s), secret, timeout, &stop_);
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
  std::atomic<bool> stop_{false};
};

RootRegistry& registry() {
  static RootRegistry r;
  return r;
}

}  // namespace

void startRoot(net::Socket listening, uint64_t secret, std::chrono::seconds timeout) {
  registry().start(std::move(listening), secret, timeout);
}

int liveRoots() { return registry().live(); }

}  // namespace braid::bootstrap
