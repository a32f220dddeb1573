// What a peer's connection descriptor may say. A descriptor arrives over the bootstrap from
// another process: nothing in it is used before it matches what this rank derived itself for
// that peer (the transport its route allows, the FIFO sizes this rank uses, a segment name of
// the peer's own making, the peer's own address). An in-process FIFO is named
// by a token this process issued (transport/p2p), never by an address. The sender's answer (an
// Acknowledgement: its rank, its credit line) is checked the same way.
#pragma once

#include <string>

#include "core/socket.h"
#include "transport/fifo.h"

namespace braid::transport {

/// What this rank expects of the descriptor `peer` sends for one connection.
struct DescriptorExpectation {
  int peer = -1;
  bool sameProcess = false;  ///< the peer is a thread of this process (kP2p allowed)
  bool sharedMemory = false;  ///< the peer is a process of this host with this /dev/shm (kShm allowed)
  FifoSizes sizes{};         ///< the FIFO sizes this rank uses for the connection
  std::string shmPrefix;     ///< how the peer's segment names start (shm::segmentPrefix of its identity)
  net::SocketAddress peerAddress;  ///< the peer's bootstrap address: network ends listen on its host
};

/// "" when `d` is what `e` allows; otherwise why not (for an error naming the peer).
std::string checkDescriptor(const Descriptor& d, const DescriptorExpectation& e);

/// "" when `a`, the acknowledgement `e.peer` sent for a connection of `kind` to this rank (its
/// receiver, whose slots are GPU memory when dataShared), is what it may say: its own rank, a
/// credit line only for kShm (in a segment of its own making, or GPU memory only where this
/// rank's slots are); otherwise why not.
std::string checkAcknowledgement(const Acknowledgement& a, const DescriptorExpectation& e, Kind kind, bool dataShared);

}  // namespace braid::transport
