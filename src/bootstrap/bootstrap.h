// The out-of-band channel of one communicator: every rank's listening address, allgather and
// barrier in log2(nranks) rounds (Bruck; dissemination), and tagged point-to-point messages
// for later setup work. Every message is its own short TCP connection to the receiver's
// listening socket: a rank holds no connection between calls.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <array>
#include <functional>
#include <map>
#include <mutex>
#include <vector>

#include "bootstrap/unique_id.h"
#include "bootstrap/wire.h"
#include "core/interfaces.h"

namespace braid::bootstrap {

/// Where to listen and how long to wait.
struct NetSettings {
  net::InterfaceRequest interface;
  std::chrono::seconds timeout{300};
};

class Bootstrap {
 public:
  /// Registers with the root named by `id` as `rank` of `nRanks` and receives every rank's
  /// address. Waits at most settings.timeout (plus a grace period for the
  /// root's answer); throws a braid::Error that names the root, the rank and the reason.
  static std::unique_ptr<Bootstrap> join(const UniqueId& id, int rank, int nRanks, const NetSettings& settings,
                                         const std::atomic<bool>* abortFlag);
  /// The same with several unique ids (ncclCommInitRankScalable): the rank registers with the
  /// root of ids[rootOfRank(rank)], which serves nRanks / ids.size() ranks; root 0 gathers the
  /// other roots' blocks, so no root talks to every rank. Every rank passes the same ids in the
  /// same order.
  static std::unique_ptr<Bootstrap> join(const std::vector<UniqueId>& ids, int rank, int nRanks,
                                         const NetSettings& settings, const std::atomic<bool>* abortFlag);

  int rank() const { return rank_; }
  /// The communicator's id, drawn at random by the root: the same on every rank, and nothing
  /// of the unique id's secret (so it may appear in logs and shared-memory names).
  uint64_t commId() const { return commId_; }
  /// Messages received before anything waits for them are held, up to bounds (beyond them
  /// the wait fails, naming the sender: the ranks' calls do not match): by default 4096 + 64
  /// per rank (every peer's descriptors of many connection sets) and 256 MiB. Tests lower them.
  void limitUnexpected(size_t messages, size_t bytes) {
    maxUnexpected_ = messages;
    maxUnexpectedBytes_ = bytes;
  }
  int nRanks() const { return static_cast<int>(peers_.size()); }
  const net::SocketAddress& peerAddress(int rank) const { return peers_[rank]; }
  /// How long any wait on a peer may take (BRAID_BOOTSTRAP_TIMEOUT).
  std::chrono::seconds timeout() const { return timeout_; }

  /// All ranks: data holds nRanks slots of bytesPerRank; slot rank() is this rank's input;
  /// on return every slot holds that rank's input. Bruck's algorithm: ceil(log2 nranks) rounds,
  /// in round k a message of min(2^k, nranks - 2^k) slots to rank - 2^k, one from rank + 2^k
  /// (nranks log nranks messages in all, where a ring takes nranks^2).
  void allGather(void* data, size_t bytesPerRank);
  /// All ranks: block p of `sendData` (bytesPerRank each, nranks blocks) goes to rank p, and
  /// block p of `recvData` is what rank p sent this rank. Bruck's algorithm: ceil(log2 nranks)
  /// rounds; in the round of distance d, the blocks whose rotated index has bit d set go to
  /// rank + d in one message and as many come from rank - d (nranks log nranks messages in
  /// all, where a message per pair would be nranks^2).
  void allToAll(const void* sendData, void* recvData, size_t bytesPerRank);
  /// All ranks: returns once every rank has entered (dissemination: ceil(log2 nranks) rounds
  /// of an empty message to rank + 2^k and one from rank - 2^k).
  void barrier();
  /// Sends size bytes to `peer` under `tag` (does not wait for the matching recv). abortFlag,
  /// when given, is watched instead of the communicator's: shrink talks over the channel of a
  /// communicator that failed (its flag raised), watching the new communicator's flag.
  void send(int peer, uint32_t tag, const void* data, size_t size, const std::atomic<bool>* abortFlag = nullptr);
  /// Receives the message `peer` sent under `tag`; its size must be exactly size. abortFlag:
  /// as send's.
  void recv(int peer, uint32_t tag, void* data, size_t size, const std::atomic<bool>* abortFlag = nullptr);
  /// The rank a send or recv is waiting on now, or -1: for the watchdog, which must tell a
  /// wait on a peer that died from a peer that exited after doing its part.
  int waitingOn() const { return waitingOn_.load(std::memory_order_relaxed); }
  /// The peer of the last wait for a message that timed out (-1: none has): the caller says
  /// what that means for the user's call.
  int timedOutOn() const { return timedOutOn_.load(std::memory_order_relaxed); }

  /// Inquiries, between watchdogs (datapath/watchdog.h): a rank whose call has waited a
  /// while on a peer asks that peer what it is doing, and the peer answers with the operation
  /// it is in. Only the thread that calls serviceInquiries (the watchdog's) sends them: a
  /// question or an answer is one small message sent within half a second or not at all, and
  /// whichever thread reads the listener files the ones that come in.
  static constexpr size_t kAnswerBytes = 64;
  using Answer = std::array<char, kAnswerBytes>;
  /// What this rank answers the rank that asked (called by serviceInquiries, once per asker:
  /// the answer may depend on who asks).
  void setAnswerer(std::function<Answer(int asker)> answerer);
  /// Reads this rank's listener when no other thread does, and answers the peers that asked.
  void serviceInquiries();
  /// Asks `peer` what it is doing; false when it could not be reached.
  bool inquire(int peer);
  /// Takes `peer`'s latest answer (false: none came since the last take).
  bool takeAnswer(int peer, Answer* out);

 private:
  Bootstrap(int rank, uint64_t secret, Listener listener, const NetSettings& settings,
            const std::atomic<bool>* abortFlag);
  net::Clock::time_point deadline() const { return net::Clock::now() + timeout_; }
  /// Waits for a message matching (type, from, tag); queues the others. abortFlag: null for
  /// the communicator's.
  Message await(MessageType type, int from, uint32_t tag, const char* what,
                const std::atomic<bool>* abortFlag = nullptr);
  /// Asks `peer` whether it still listens (a wait on it lasts); throws ncclRemoteError naming
  /// the wait when it refuses.
  void probe(int peer, const std::atomic<bool>* abortFlag, const char* what, uint32_t tag);
  /// Holds a message nothing waits for yet (its connection closed); drops probes, and files
  /// inquiries and answers.
  void queueUnexpected(Message m);
  /// Sends one small message to `peer` within half a second; false when it could not.
  bool note(int peer, uint32_t tag, const void* data, size_t size);
  /// Connects to `peer` and sends one message; while the receiver's buffers are full, reads
  /// this rank's own incoming messages (two ranks sending each other large messages at once,
  /// as the collectives' rounds do, cannot block each other).
  void post(int peer, MessageType type, uint32_t tag, const void* data, size_t size,
            const std::atomic<bool>* abortFlag = nullptr);
  /// One round of allgather or barrier: posts to `to`, then waits for `from`'s message of
  /// exactly recvSize bytes.
  void round(int to, int from, uint32_t tag, const void* sendData, size_t sendSize, void* recvData, size_t recvSize);

  int rank_;
  uint64_t secret_;  ///< the id's secret until the table came, then the session key
  uint64_t commId_ = 0;
  std::chrono::seconds timeout_;
  const std::atomic<bool>* abortFlag_;
  std::vector<net::SocketAddress> peers_;
  std::mutex listenMutex_;
  Listener listener_;
  std::deque<Message> unexpected_;
  size_t unexpectedBytes_ = 0;
  size_t maxUnexpected_ = 4096;
  size_t maxUnexpectedBytes_ = size_t(256) << 20;
  std::mutex collectiveMutex_;  // (allGather, allToAll and barrier: one at a time, numbered alike on all ranks)
  uint32_t collectives_ = 0;
  std::atomic<int> waitingOn_{-1};
  std::atomic<int> timedOutOn_{-1};
  std::mutex inquiryMutex_;  // (the three below)
  std::function<Answer(int asker)> answerer_;
  std::vector<int> askedBy_;        ///< ranks whose question waits for an answer
  std::map<int, Answer> answers_;   ///< the answers that came, by rank
};

}  // namespace braid::bootstrap
