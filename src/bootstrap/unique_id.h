// What Braid keeps in the 128 opaque bytes of an ncclUniqueId.
#pragma once

#include <nccl.h>

#include <cstdint>

#include "core/socket.h"

namespace braid::bootstrap {

/// The decoded id: who the root is and the secret every connection must present.
struct UniqueId {
  uint64_t secret = 0;
  net::SocketAddress root;
  /// True when the id came from NCCL_COMM_ID: nobody has started the root yet, and
  /// rank 0 starts it inside ncclCommInitRank.
  bool rootStartedByRank0 = false;
  /// For an id from ncclCommGetUniqueId: the size of the communicator it grows (its ranks keep
  /// 0..grownFrom-1, so a new rank checks its number before it connects); 0 for other ids.
  int32_t grownFrom = 0;

  ncclUniqueId encode() const;
  /// Throws ncclInvalidArgument when the bytes are not an id made by Braid.
  static UniqueId decode(const ncclUniqueId& id);
};

/// The fixed secret of an NCCL_COMM_ID address (every rank computes the same one). Public:
/// anyone who knows the address computes it too.
uint64_t secretForAddress(const std::string& commId);

/// The secret connections present: the id's own, keyed with BRAID_COMM_SECRET when that is set
/// (`passphrase`; "" leaves the id's secret as it is). Every rank and the root must use the
/// same passphrase.
uint64_t keyedSecret(uint64_t idSecret, const std::string& passphrase);

}  // namespace braid::bootstrap
