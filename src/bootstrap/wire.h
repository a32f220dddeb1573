// Bootstrap messages on the wire. Every connection starts with a header carrying a key; a
// connection whose first bytes are not a valid header with the right key is closed and logged.
// Payload lengths are bounded by what each message type can legitimately carry before any
// allocation, and a payload's buffer grows only as its bytes arrive: a header that announces
// 64 MiB and then sends nothing costs its receiver nothing (issue 41).
//
// Two keys: registration at the root presents the unique id's secret; the root answers the
// ranks it admitted with a session key of its own (random), and every later message between
// ranks presents that key instead. Whoever learns the id's secret after the table went out
// (NCCL_COMM_ID makes it public) cannot talk to the ranks.
#pragma once

#include <poll.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "core/socket.h"

namespace braid::bootstrap {

enum class MessageType : uint32_t {
  kRegister = 0x52454731,  ///< rank -> root: Registration
  kTable = 0x54424c31,     ///< root -> rank: TableHead, then the listening address of every rank
  kError = 0x45525231,     ///< root -> rank: init failed; payload is the reason
  kRound = 0x524e4431,     ///< rank -> rank: one round of an allgather or barrier
  kBlock = 0x424c4b31,     ///< root j > 0 -> root 0: BlockHead, then its ranks' addresses
  kPeer = 0x50325031,      ///< rank -> rank: one tagged message
};

/// The largest payload a peer may announce (a full peer table of 64K ranks fits easily);
/// maxPayload() bounds each type further.
constexpr uint32_t kMaxPayloadBytes = 64u << 20;
/// The longest reason a root sends with kError.
constexpr uint32_t kMaxErrorBytes = 64u << 10;

struct MessageHeader {
  uint64_t secret;  ///< the id's secret (to and from the root), else the session key
  MessageType type;
  int32_t rank;  ///< sender's rank (-1 for the root)
  uint32_t tag;
  uint32_t length;  ///< payload bytes that follow
};
static_assert(sizeof(MessageHeader) == 24 && std::is_trivially_copyable_v<MessageHeader>);

/// What a rank tells the root.
struct Registration {
  int32_t nRanks;
  uint32_t abiVersion;  ///< NCCL_VERSION_CODE the rank was built for
  net::SocketAddress::Packed listenAddress;
  char braidVersion[16];
  /// With several unique ids (ncclCommInitRankScalable): how many roots, which of them this
  /// one is, and where root 0 listens and its secret, which root j > 0 presents there.
  int32_t nRoots;
  int32_t rootIndex;
  net::SocketAddress::Packed firstRoot;
  uint64_t firstRootSecret;
};
static_assert(std::is_trivially_copyable_v<Registration>);

/// Which ranks root `root` of nRoots serves: nRanks / nRoots each, the first nRanks % nRoots
/// roots one more (as NCCL spreads them). 0 <= root < nRoots <= nRanks.
struct RankBlock {
  int first;
  int count;
};
RankBlock blockOfRoot(int root, int nRanks, int nRoots);
/// The root a rank registers with (the inverse of blockOfRoot).
int rootOfRank(int rank, int nRanks, int nRoots);

/// What root j > 0 sends root 0 once its ranks are all there; their addresses follow, one
/// Packed per rank of the block, in rank order.
struct BlockHead {
  int32_t nRanks;
  int32_t nRoots;
  int32_t rootIndex;
  int32_t first;
  int32_t count;
  uint32_t reserved;
};
static_assert(sizeof(BlockHead) == 24 && std::is_trivially_copyable_v<BlockHead>);

/// What the root's table starts with; the listening addresses follow, one Packed per rank.
struct TableHead {
  uint64_t commId;      ///< random: names the communicator in logs and shared-memory names
  uint64_t sessionKey;  ///< random: what every message between ranks presents from now on
  int32_t nRanks;
  uint32_t reserved;
};
static_assert(sizeof(TableHead) == 24 && std::is_trivially_copyable_v<TableHead>);

/// The most ranks a communicator may have: its table fits one message.
constexpr int32_t kMaxRanks = static_cast<int32_t>((kMaxPayloadBytes - sizeof(TableHead)) / sizeof(net::SocketAddress::Packed));

/// The most payload bytes a message of `type` can legitimately carry: a registration exactly
/// its struct, a table every rank's address, a block half of them (a root of at least two), a
/// reason kMaxErrorBytes, rounds and tagged messages kMaxPayloadBytes; 0 for an unknown type.
uint32_t maxPayload(MessageType type);

/// What any connection's payload may hold whatever others hold (a registration, a small message).
constexpr size_t kFreePayloadBytes = size_t(16) << 10;
/// How far a payload buffer that has received `received` bytes may grow at once: as much again
/// (so copies stay linear), at least kFreePayloadBytes, at most 4 MiB.
size_t payloadGrowth(size_t received);

/// A complete message received by a Listener, with its connection (for the root's reply; closed
/// for a rank's listener).
struct Message {
  MessageHeader header{};
  std::vector<char> payload;
  net::Socket socket;
};

/// Sends a header and payload on a connected socket.
void sendMessage(net::Socket& socket, uint64_t secret, MessageType type, int rank, uint32_t tag,
                 const void* payload, uint32_t length, net::Clock::time_point deadline,
                 const std::atomic<bool>* abortFlag);

/// Receives one message on a connected socket: the header checked against secret, a known
/// type and its maxPayload; the payload's buffer grows as the bytes arrive.
Message receiveMessage(net::Socket& socket, uint64_t secret, net::Clock::time_point deadline,
                       const std::atomic<bool>* abortFlag, const char* from);

/// Accepts connections on a listening socket and reads their first message, many at once
/// without blocking on any one: a silent or garbage connection never holds up the others.
class Listener {
 public:
  /// Whether a complete message keeps its connection (Message::socket), for a reply: the
  /// root's do; a rank's are closed as soon as their message is whole, so the messages a busy
  /// rank has not taken yet hold no descriptors (an AlltoAll's setup on many thread ranks).
  enum class Replies { kKeep, kClose };
  /// The message types a listener takes (any other closes the connection at its header): a
  /// root's, registrations and other roots' blocks; a rank's, rounds and tagged messages.
  using Accepts = std::vector<MessageType>;
  static Accepts rootMessages() { return {MessageType::kRegister, MessageType::kBlock}; }
  static Accepts rankMessages() { return {MessageType::kRound, MessageType::kPeer}; }
  Listener(net::Socket listening, uint64_t secret, std::string owner, Replies replies = Replies::kKeep,
           Accepts accepts = rankMessages());

  /// Waits up to timeoutMs for one complete, valid message; returns false when none came.
  bool poll(int timeoutMs, Message* out);
  /// From now on connections must present `secret` (the session key, once the table came).
  void rekey(uint64_t secret) { secret_ = secret; }
  /// At most this many connections wait at once for their first message: beyond it one that
  /// has been silent (not even the key) for a second is closed for each newcomer, or, with
  /// none such, accepting waits (a flood of silent connections cannot take every descriptor
  /// of the process, and a real peer, whose message is there as soon as its connection, is
  /// never closed to make room).
  static constexpr size_t kMaxPending = 256;
  /// The payload bytes all waiting connections together may hold (their buffers' sizes,
  /// messages complete or not) beyond kFreePayloadBytes each; but the oldest connection whose
  /// message is under way may always grow to its type's bound (so that one large message always
  /// completes). A connection that would pass it is not read until others make room (or time
  /// out). A root thus holds at most 16 + 4 (256 x 16 KiB) + 32 (a block) MiB, and 4 of slack.
  static constexpr size_t kPendingBudget = size_t(16) << 20;
  const net::Socket& socket() const { return listening_; }
  /// The payload bytes the waiting connections hold now (for tests and the fuzzer).
  size_t heldBytes() const;

 private:
  struct Pending {
    net::Socket socket;
    MessageHeader header{};
    size_t headerBytes = 0;
    std::vector<char> payload;
    size_t payloadBytes = 0;
    net::Clock::time_point accepted;
    net::Clock::time_point deadline;
    bool complete = false;  ///< the message is whole, waiting to be returned
    bool sized = false;     ///< the header was checked (type, length)
    bool waitsForRoom = false;  ///< its buffer is full and kPendingBudget leaves no room: not read
  };
  /// Reads what is available on p; true when its message is complete. Throws to drop it.
  /// `exempt`: p may grow beyond kPendingBudget; `held` counts the bytes pending connections hold.
  bool advance(Pending& p, bool exempt, size_t* held);
  /// Accepts what waits on the listening socket, within kMaxPending and the descriptors left.
  void acceptAll();
  /// Reads every pending connection; closes (and logs) those that fail or run out of time.
  void advanceAll();
  /// The index of a pending connection that may be closed for a newcomer (silent, without even
  /// the key, for kEvictAfter), or -1.
  long evictable(net::Clock::time_point now) const;

  net::Socket listening_;
  uint64_t secret_;
  std::string owner_;  ///< "root 1.2.3.4:5" or "rank 3", for log messages
  Replies replies_;
  Accepts accepts_;
  std::vector<Pending> pending_;
  std::vector<pollfd> pollFds_;  // poll()'s descriptors, reused
  /// Until when accepting is paused (the process ran out of descriptors: accept failed with
  /// EMFILE/ENFILE and poll would report the listening socket readable at once, forever).
  net::Clock::time_point acceptPausedUntil_{};
  bool full_ = false;  ///< kMaxPending wait and none may be closed: accepting waits
  bool evictionWarned_ = false;
  bool exhaustionWarned_ = false;
  int strangerWarnings_ = 0;
};

}  // namespace braid::bootstrap
