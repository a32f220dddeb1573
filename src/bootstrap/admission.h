// The root's decisions about registrations, apart from the sockets they came on: who is
// admitted, when the communicator is complete, and why it failed. Bounded by what it checks
// first (nranks within kMaxRanks before anything is sized by it); fuzzed on its own
// (test/fuzz/bootstrap_fuzz.cc).
#pragma once

#include <nccl.h>

#include <chrono>
#include <map>
#include <string>

#include "bootstrap/wire.h"

namespace braid::bootstrap {

class Admission {
 public:
  /// Rank `rank`'s registration, sent from `from` (an address, for messages). True when it
  /// is kept (the rank's first); false when refused: out of range, a second claim of a rank,
  /// or an nranks that is absurd or disagrees with the first registrant's (failed() then
  /// says why; a refused registration's sender is still told the reason).
  bool admit(int rank, const Registration& r, const std::string& from);
  /// Records why nothing completed by the deadline: which ranks are missing.
  void timeOut(const std::string& rootName, std::chrono::seconds waited);

  bool failed() const { return !error_.empty(); }
  const std::string& error() const { return error_; }
  ncclResult_t errorCode() const { return errorCode_; }
  /// Every rank arrived and nothing failed.
  bool complete() const { return !failed() && nRanks_ > 0 && static_cast<int>(admitted_.size()) == nRanks_; }
  int nRanks() const { return nRanks_; }
  /// The registrations kept, by rank.
  const std::map<int, Registration>& admitted() const { return admitted_; }

 private:
  void refuse(const std::string& why);

  int nRanks_ = -1;
  int firstRank_ = -1;
  std::map<int, Registration> admitted_;
  std::map<int, std::string> from_;
  std::string error_;
  ncclResult_t errorCode_ = ncclSystemError;
};

}  // namespace braid::bootstrap
