// File descriptors handed from one process of this host to another: how a GPU's memory
// exported as a POSIX file descriptor (cuMem) reaches the process that maps it.
//
// A process offers a descriptor under a token of 128 random bits; another process that knows
// the owner's server id and the token (an Offer, passed over the bootstrap) fetches its own
// copy. The owner answers on a Unix datagram socket in the abstract namespace
// ("braid-fd-<server id in hex>"), served by a thread of its own started at its first offer,
// with the descriptor as SCM_RIGHTS; the fetcher asks from a socket of its own, so no
// connection is ever accepted and neither side waits for the other to reach some call.
//
// The server id is 64 random bits of the process (drawn again in a forked child), not its pid:
// containers in different pid namespaces that share a network namespace share the abstract
// names too, and two of their processes may have the same pid. The server answers only
// requests whose sender (its credentials, SCM_CREDENTIALS) runs as the server's user or as
// root, and sends each answer without waiting, outside its lock: a requester that never reads
// its answers loses them and delays no one else.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace braid::fds {

/// 128 random bits naming one offer (getrandom); all zero names none.
struct Token {
  uint64_t word[2];
  bool empty() const { return word[0] == 0 && word[1] == 0; }
  bool operator==(const Token& o) const { return word[0] == o.word[0] && word[1] == o.word[1]; }
  bool operator!=(const Token& o) const { return !(*this == o); }
  bool operator<(const Token& o) const { return word[0] != o.word[0] ? word[0] < o.word[0] : word[1] < o.word[1]; }
};

/// Where another process fetches one offered descriptor: the owner's server id and the token.
/// The owner's pid only names it in messages.
struct Offer {
  uint64_t server;
  Token token;
  int32_t pid;
  uint32_t reserved;
};
static_assert(std::is_trivially_copyable_v<Offer> && sizeof(Offer) == 32);

/// This process's server id (never 0): drawn at the first call, drawn again in a forked child.
uint64_t serverId();
/// Keeps a duplicate of `fd` for other processes to fetch until withdraw(); returns where to
/// fetch it. Throws ncclSystemError when the serving socket cannot be made.
Offer offer(int fd);
/// Closes the offered duplicate (later fetches fail); unknown tokens are ignored.
void withdraw(const Token& token);
/// A descriptor of this process for what `from` names; throws ncclSystemError naming the owner
/// when it does not answer within `timeout`, has no such token or refuses this process's user.
int fetch(const Offer& from, std::chrono::milliseconds timeout = std::chrono::seconds(10));

/// The datagram fetch() sends to ask for `token`.
std::array<unsigned char, 24> encodeRequest(const Token& token);
/// The token a datagram received by the server asks for: true only for a request of exactly
/// the right size, with the right magic and a token that is not all zero. Reads only the
/// `size` bytes at `data`; pure (test/fuzz/fd_request_fuzz.cc).
bool parseRequest(const void* data, size_t size, Token* token);
/// Whether the server (running as `serverUid`) answers a requester running as `peerUid`: the
/// same user, or root.
bool peerAllowed(uint32_t peerUid, uint32_t serverUid);

}  // namespace braid::fds
