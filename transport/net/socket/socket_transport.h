// Ranks on different hosts, over TCP: each end keeps its own FIFO memory, and the process's
// proxy thread (src/proxy) forwards every step the sender's kernel publishes to the receiver's
// FIFO through one or more sockets, with the step's signature, the sender's announcement and
// each end's fault notice, so the data path, mismatch checks and failure reports work exactly
// as they do through shared memory.
//
// Setup: the receiver listens on this rank's bootstrap interface (NCCL_SOCKET_IFNAME) and
// sends a Descriptor with its address and a random nonce over the bootstrap channel (itself
// authenticated by the communicator's secret). The sender connects nSockets sockets and
// presents the nonce, the communicator hash and both ranks on each; anything else that
// connects is dropped. Steps are striped over the sockets: step s travels on socket s % n.
//
// Wire: a 64-byte frame header (type, step, payload bytes, flags, signature) then the payload.
// Every length is checked against the FIFO's slot size before a byte of payload is read; a
// frame that does not fit is a protocol error, reported like a broken connection. A frame's
// length lands as its step's size (conn.sizes), which the receiving kernel compares with what
// it expects (kernels::checkStepBytes): a frame declaring fewer or more bytes than it carries
// fails its own step. Both ends must have the same byte order (as for NCCL's socket transport).
#pragma once

#include <chrono>
#include <memory>

#include "transport/fifo.h"

namespace braid::transport::socket {

struct Settings {
  net::SocketAddress listenAt;       ///< this rank's bootstrap address (the port is ignored)
  int nSockets = 1;                  ///< sockets per connection (1..64)
  uint64_t commHash = 0;             ///< the communicator's hash, presented by the sender
  int rank = -1;                     ///< this rank
  std::chrono::seconds timeout{300}; ///< how long the receiver waits for the sender to connect
  const uint32_t* abortFlag = nullptr;  ///< the communicator's abort flag: set, nothing is drained at destroy
};

/// Receiver side: local FIFO memory and a listening socket, described in `out`; the proxy
/// accepts the sender's sockets in the background.
std::unique_ptr<FifoMemory> createReceiver(const FifoSizes& sizes, const Settings& settings, int peer, Descriptor* out);
/// Sender side: local FIFO memory of the receiver's sizes and d.nSockets connected sockets.
/// Throws ncclSystemError naming the peer and address when it cannot connect.
std::unique_ptr<FifoMemory> connectSender(const Descriptor& d, const Settings& settings, int peer);

}  // namespace braid::transport::socket
