// Bootstrap messages on the wire. Every connection starts with a header carrying the
// communicator's secret; a connection whose first bytes are not a valid header with the
// right secret is closed and logged. Payload lengths are bounded before any allocation.
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
  kTable = 0x54424c31,     ///< root -> rank: the listening address of every rank
  kError = 0x45525231,     ///< root -> rank: init failed; payload is the reason
  kRing = 0x52494e31,      ///< rank -> next rank: this connection is the ring link
  kPeer = 0x50325031,      ///< rank -> rank: one tagged message
};

/// The largest payload a peer may announce (a full peer table of 64K ranks fits easily).
constexpr uint32_t kMaxPayloadBytes = 64u << 20;

struct MessageHeader {
  uint64_t secret;
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
};
static_assert(std::is_trivially_copyable_v<Registration>);

/// A complete message received by a Listener, with its connection (for replies or the ring).
struct Message {
  MessageHeader header{};
  std::vector<char> payload;
  net::Socket socket;
};

/// Sends a header and payload on a connected socket.
void sendMessage(net::Socket& socket, uint64_t secret, MessageType type, int rank, uint32_t tag,
                 const void* payload, uint32_t length, net::Clock::time_point deadline,
                 const std::atomic<bool>* abortFlag);

/// Receives one message on a connected socket (header checked against secret and expected type).
Message receiveMessage(net::Socket& socket, uint64_t secret, net::Clock::time_point deadline,
                       const std::atomic<bool>* abortFlag, const char* from);

/// Accepts connections on a listening socket and reads their first message, many at once
/// without blocking on any one: a silent or garbage connection never holds up the others.
class Listener {
 public:
  Listener(net::Socket listening, uint64_t secret, std::string owner);

  /// Waits up to timeoutMs for one complete, valid message; returns false when none came.
  bool poll(int timeoutMs, Message* out);
  const net::Socket& socket() const { return listening_; }

 private:
  struct Pending {
    net::Socket socket;
    MessageHeader header{};
    size_t headerBytes = 0;
    std::vector<char> payload;
    size_t payloadBytes = 0;
    net::Clock::time_point deadline;
  };
  /// Reads what is available on p; true when its message is complete. Throws to drop it.
  bool advance(Pending& p);

  net::Socket listening_;
  uint64_t secret_;
  std::string owner_;  ///< "root 1.2.3.4:5" or "rank 3", for log messages
  std::vector<Pending> pending_;
  std::vector<pollfd> pollFds_;  // poll()'s descriptors, reused
};

}  // namespace braid::bootstrap
