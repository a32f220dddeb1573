// File descriptors handed from one process of this host to another: how a GPU's memory
// exported as a POSIX file descriptor (cuMem) reaches the process that maps it.
//
// A process offers a descriptor under a random token; another process that knows the owner's
// pid and the token fetches its own copy. The owner answers on a Unix datagram socket in the
// abstract namespace ("braid-fd-<pid>"), served by a thread of its own started at its first
// offer, with the descriptor as SCM_RIGHTS; the fetcher asks from a socket of its own, so no
// connection is ever accepted and neither side waits for the other to reach some call.
#pragma once

#include <chrono>
#include <cstdint>

namespace braid::fds {

/// Keeps a duplicate of `fd` for other processes to fetch until withdraw(); returns the token
/// that names it (never 0). Throws ncclSystemError when the serving socket cannot be made.
uint64_t offer(int fd);
/// Closes the offered duplicate (later fetches fail); unknown tokens are ignored.
void withdraw(uint64_t token);
/// A descriptor of this process for what process `ownerPid` offered under `token`; throws
/// ncclSystemError naming the owner when it does not answer within `timeout` or has no such
/// token.
int fetch(int ownerPid, uint64_t token, std::chrono::milliseconds timeout = std::chrono::seconds(10));

}  // namespace braid::fds
