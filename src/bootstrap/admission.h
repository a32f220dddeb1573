// The root's decisions about registrations, apart from the sockets they came on: who is
// admitted, when the communicator is complete, and why it failed. With several roots
// (ncclCommInitRankScalable) each admits its block of ranks, and root 0 also the other roots'
// blocks, whole. Bounded by what it checks
// first (nranks within kMaxRanks before anything is sized by it); fuzzed on its own
// (test/fuzz/bootstrap_fuzz.cc).
#pragma once

#include <nccl.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "bootstrap/wire.h"

namespace braid::bootstrap {

class Admission {
 public:
  /// Rank `rank`'s registration, sent from `from` (an address, for messages). True when it
  /// is kept (the rank's first); false when refused: out of range, a second claim of a rank,
  /// or an nranks that is absurd or disagrees with the first registrant's (failed() then
  /// says why; a refused registration's sender is still told the reason).
  bool admit(int rank, const Registration& r, const std::string& from);
  /// Root `head.rootIndex`'s block of ranks and their addresses (this root is then root 0):
  /// true when kept; false when refused (it disagrees with what this root knows, or came twice).
  bool admitBlock(const BlockHead& head, const std::vector<net::SocketAddress::Packed>& addresses,
                  const std::string& from);
  /// Records why nothing completed by the deadline: which ranks are missing.
  void timeOut(const std::string& rootName, std::chrono::seconds waited);

  bool failed() const { return !error_.empty(); }
  const std::string& error() const { return error_; }
  ncclResult_t errorCode() const { return errorCode_; }
  /// Every rank of this root's block arrived (root 0 of several: and every other root's
  /// block), and nothing failed.
  bool complete() const;
  int nRanks() const { return nRanks_; }
  int nRoots() const { return nRoots_; }
  int rootIndex() const { return rootIndex_; }
  /// The registrations kept, by rank.
  const std::map<int, Registration>& admitted() const { return admitted_; }
  /// The listening addresses of the ranks known here, by rank (all of them once root 0 is complete).
  std::vector<net::SocketAddress::Packed> addresses() const;
  /// Where root 0 listens and its secret (as this root's ranks said; meaningful with nRoots() > 1).
  net::SocketAddress::Packed firstRoot() const { return firstRoot_; }
  uint64_t firstRootSecret() const { return firstRootSecret_; }

 private:
  void refuse(const std::string& why);
  /// The first registration or block fixes nranks, the number of roots and this root's index;
  /// later ones must agree. False (refused) when they do not.
  bool agree(int nRanks, int nRoots, int rootIndex, const std::string& who);

  int nRanks_ = -1;
  int nRoots_ = 0;
  int rootIndex_ = -1;
  int firstRank_ = -1;
  std::string firstWho_;
  net::SocketAddress::Packed firstRoot_{};
  uint64_t firstRootSecret_ = 0;
  std::map<int, Registration> admitted_;
  std::map<int, std::vector<net::SocketAddress::Packed>> blocks_;  // root 0: the other roots' ranks
  std::map<int, std::string> from_;
  std::string error_;
  ncclResult_t errorCode_ = ncclSystemError;
};

}  // namespace braid::bootstrap
