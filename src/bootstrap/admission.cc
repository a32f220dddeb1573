#include "bootstrap/admission.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "bootstrap/root.h"

namespace braid::bootstrap {

void Admission::refuse(const std::string& why) {
  if (!error_.empty()) return;  // (the first reason stands)
  errorCode_ = ncclInvalidUsage;
  error_ = why;
}

bool Admission::agree(int nRanks, int nRoots, int rootIndex, const std::string& who) {
  if (nRanks < 1 || nRanks > kMaxRanks) {  // (before anything is sized by it)
    refuse(who + " called init with nranks=" + std::to_string(nRanks) + "; a communicator has 1 to " +
           std::to_string(kMaxRanks) + " ranks");
    return false;
  }
  if (nRoots < 1 || nRoots > nRanks || rootIndex < 0 || rootIndex >= nRoots) {
    refuse(who + " came with root " + std::to_string(rootIndex) + " of " + std::to_string(nRoots) +
           " unique ids for nranks=" + std::to_string(nRanks) + "; there are 1 to nranks ids");
    return false;
  }
  if (nRanks_ < 0) {
    nRanks_ = nRanks;
    nRoots_ = nRoots;
    rootIndex_ = rootIndex;
    firstWho_ = who;
  }
  if (nRanks != nRanks_) {
    refuse(who + " called init with nranks=" + std::to_string(nRanks) + " but " + firstWho_ + " with nranks=" +
           std::to_string(nRanks_));
    return false;
  }
  if (nRoots != nRoots_ || rootIndex != rootIndex_) {
    refuse(who + " was given " + std::to_string(nRoots) + " unique ids and came to id " + std::to_string(rootIndex) +
           ", but " + firstWho_ + " " + std::to_string(nRoots_) + " ids and id " + std::to_string(rootIndex_) +
           ": do all ranks pass the same ids in the same order?");
    return false;
  }
  return true;
}

bool Admission::admit(int rank, const Registration& r, const std::string& from) {
  const std::string who = "rank " + std::to_string(rank);
  const bool first = nRanks_ < 0;
  if (!agree(r.nRanks, r.nRoots, r.rootIndex, who)) return false;
  if (rank < 0 || rank >= nRanks_) {
    refuse(who + " is out of range for nranks=" + std::to_string(nRanks_));
    return false;
  }
  const RankBlock mine = blockOfRoot(rootIndex_, nRanks_, nRoots_);
  if (rank < mine.first || rank >= mine.first + mine.count) {
    refuse(who + " came to unique id " + std::to_string(rootIndex_) + " of " + std::to_string(nRoots_) +
           ", which serves ranks " + std::to_string(mine.first) + " to " + std::to_string(mine.first + mine.count - 1));
    return false;
  }
  if (first || admitted_.empty()) {
    firstRoot_ = r.firstRoot;
    firstRootSecret_ = r.firstRootSecret;
  } else if (std::memcmp(&firstRoot_, &r.firstRoot, sizeof(firstRoot_)) != 0 || firstRootSecret_ != r.firstRootSecret) {
    refuse(who + " and rank " + std::to_string(admitted_.begin()->first) +
           " name different first unique ids: do all ranks pass the same ids in the same order?");
    return false;
  }
  if (admitted_.count(rank) != 0) {
    refuse("two ranks both claimed rank " + std::to_string(rank) + " (from " + from_[rank] + " and " + from + ")");
    return false;
  }
  if (firstRank_ < 0) firstRank_ = rank;
  admitted_[rank] = r;
  from_[rank] = from;
  return true;
}

bool Admission::admitBlock(const BlockHead& head, const std::vector<net::SocketAddress::Packed>& addresses,
                           const std::string& from) {
  const std::string who = "the root of unique id " + std::to_string(head.rootIndex) + " (" + from + ")";
  // (a block is only ever sent to root 0: this root is root 0 of the same number of roots)
  const int index = head.rootIndex;
  if (nRanks_ < 0 && !agree(head.nRanks, head.nRoots, 0, who)) return false;
  if (head.nRanks != nRanks_ || head.nRoots != nRoots_ || rootIndex_ != 0 || index < 1 || index >= nRoots_) {
    refuse(who + " sent the ranks of id " + std::to_string(index) + " of " + std::to_string(head.nRoots) +
           " (nranks=" + std::to_string(head.nRanks) + ") to a root that is id " + std::to_string(rootIndex_) + " of " +
           std::to_string(nRoots_) + " (nranks=" + std::to_string(nRanks_) + ")");
    return false;
  }
  const RankBlock expected = blockOfRoot(index, nRanks_, nRoots_);
  if (head.first != expected.first || head.count != expected.count ||
      addresses.size() != static_cast<size_t>(expected.count)) {
    refuse(who + " sent ranks " + std::to_string(head.first) + " (+" + std::to_string(head.count) + ", " +
           std::to_string(addresses.size()) + " addresses) where id " + std::to_string(index) + " serves ranks " +
           std::to_string(expected.first) + " (+" + std::to_string(expected.count) + ")");
    return false;
  }
  if (blocks_.count(index) != 0) {
    refuse("two roots both sent the ranks of unique id " + std::to_string(index));
    return false;
  }
  blocks_[index] = addresses;
  return true;
}

bool Admission::complete() const {
  if (failed() || nRanks_ <= 0) return false;
  if (static_cast<int>(admitted_.size()) != blockOfRoot(rootIndex_, nRanks_, nRoots_).count) return false;
  return rootIndex_ != 0 || static_cast<int>(blocks_.size()) == nRoots_ - 1;
}

std::vector<net::SocketAddress::Packed> Admission::addresses() const {
  std::vector<net::SocketAddress::Packed> all(static_cast<size_t>(std::max(nRanks_, 0)));
  for (const auto& [rank, r] : admitted_) all[rank] = r.listenAddress;
  for (const auto& [index, block] : blocks_) {
    std::copy(block.begin(), block.end(), all.begin() + blockOfRoot(index, nRanks_, nRoots_).first);
  }
  return all;
}

void Admission::timeOut(const std::string& rootName, std::chrono::seconds waited) {
  if (failed()) return;
  // Missing: this root's own ranks, and (root 0) those of the roots that never sent theirs.
  std::vector<int> missing;  // (the first 8, which describeRanks shows, and how many)
  size_t nMissing = 0;
  auto consider = [&](int r) {
    ++nMissing;
    if (missing.size() < 8) missing.push_back(r);
  };
  for (int r = 0; r < nRanks_; ++r) {
    const int root = rootOfRank(r, nRanks_, nRoots_);
    if (root == rootIndex_ ? admitted_.count(r) == 0 : (rootIndex_ == 0 && blocks_.count(root) == 0)) consider(r);
  }
  std::vector<int> silentRoots;
  for (int j = 1; rootIndex_ == 0 && j < nRoots_; ++j) {
    if (blocks_.count(j) == 0) silentRoots.push_back(j);
  }
  std::string roots;
  for (size_t i = 0; i < silentRoots.size() && i < 8; ++i) roots += (i > 0 ? ", " : "") + std::to_string(silentRoots[i]);
  if (silentRoots.size() > 8) roots += ", ...";
  errorCode_ = ncclSystemError;
  error_ = "waited " + std::to_string(waited.count()) + " s for " + describeRanks(missing, nMissing) + " of " +
           std::to_string(nRanks_) + " at " + rootName +
           (silentRoots.empty() ? ""
            : silentRoots.size() == 1 ? " (the root of unique id " + roots + " sent none of its ranks: it is missing some)"
                                      : " (the roots of unique ids " + roots + " sent none of their ranks: each is missing some)") +
           "; were all ranks given the same unique id (and the same BRAID_COMM_SECRET)?";
}

}  // namespace braid::bootstrap
