#include "bootstrap/admission.h"

#include <algorithm>
#include <vector>

#include "bootstrap/root.h"

namespace braid::bootstrap {

void Admission::refuse(const std::string& why) {
  if (!error_.empty()) return;  // (the first reason stands)
  errorCode_ = ncclInvalidUsage;
  error_ = why;
}

bool Admission::admit(int rank, const Registration& r, const std::string& from) {
  const std::string who = "rank " + std::to_string(rank);
  if (r.nRanks < 1 || r.nRanks > kMaxRanks) {  // (before anything is sized by it)
    refuse(who + " called init with nranks=" + std::to_string(r.nRanks) + "; a communicator has 1 to " +
           std::to_string(kMaxRanks) + " ranks");
    return false;
  }
  if (nRanks_ < 0) {
    nRanks_ = r.nRanks;
    firstRank_ = rank;
  }
  if (r.nRanks != nRanks_) {
    refuse(who + " called init with nranks=" + std::to_string(r.nRanks) + " but rank " + std::to_string(firstRank_) +
           " with nranks=" + std::to_string(nRanks_));
    return false;
  }
  if (rank < 0 || rank >= nRanks_) {
    refuse(who + " is out of range for nranks=" + std::to_string(nRanks_));
    return false;
  }
  if (admitted_.count(rank) != 0) {
    refuse("two ranks both claimed rank " + std::to_string(rank) + " (from " + from_[rank] + " and " + from + ")");
    return false;
  }
  admitted_[rank] = r;
  from_[rank] = from;
  return true;
}

void Admission::timeOut(const std::string& rootName, std::chrono::seconds waited) {
  if (failed()) return;
  std::vector<int> missing;  // (the first 8, which describeRanks shows, and how many)
  for (int r = 0; r < nRanks_ && missing.size() < 8; ++r) {
    if (admitted_.count(r) == 0) missing.push_back(r);
  }
  const size_t nMissing = static_cast<size_t>(std::max(nRanks_, 0)) - admitted_.size();
  errorCode_ = ncclSystemError;
  error_ = "waited " + std::to_string(waited.count()) + " s for " + describeRanks(missing, nMissing) + " of " +
           std::to_string(nRanks_) + " at " + rootName +
           "; were all ranks given the same unique id (and the same BRAID_COMM_SECRET)?";
}

}  // namespace braid::bootstrap
