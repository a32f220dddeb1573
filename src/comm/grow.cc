#include "comm/grow.h"

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bootstrap/bootstrap.h"
#include "bootstrap/root.h"
#include "bootstrap/unique_id.h"
#include "bootstrap/wire.h"

namespace braid::comm {

namespace {

// Tags of the existing ranks' agreement: 'G', the sequence (below 2^20), and the verdict's bit.
constexpr uint32_t kGrowTag = 0x47000000;
constexpr uint32_t kVerdictBit = 1u << 20;
static_assert((kGrowTag & (kVerdictBit | (kVerdictBit - 1))) == 0, "the sequence and the verdict's bit are free");

/// What one existing rank passed to ncclCommGrow, as rank 0 of the parent sees it.
struct Offer {
  int32_t nRanks;
  int32_t rankArgument;
  int32_t match;  // GrowIdMatch
  ncclUniqueId id;
};

/// Rank 0's answer to every existing rank: go (code ncclSuccess, with the id) or the error
/// that all of them return.
struct Verdict {
  int32_t code;
  ncclUniqueId id;
  char reason[480];
};

Verdict judge(const std::vector<Offer>& offers) {
  const int parentRanks = static_cast<int>(offers.size());
  Verdict v{};
  v.code = ncclSuccess;
  auto refuse = [&v](ncclResult_t code, const std::string& text) {
    if (v.code != ncclSuccess) return;  // (the first problem, in rank order, is the one told)
    v.code = code;
    snprintf(v.reason, sizeof v.reason, "%s", text.c_str());
  };
  std::vector<int> holders, foreign;
  for (int r = 0; r < parentRanks; ++r) {
    const Offer& o = offers[r];
    const std::string who = "existing rank " + std::to_string(r);
    if (o.rankArgument != -1) {
      refuse(ncclInvalidArgument, who + " passed rank = " + std::to_string(o.rankArgument) +
                                      "; existing ranks pass -1 (they keep their numbers)");
    }
    if (o.nRanks <= parentRanks || o.nRanks > bootstrap::kMaxRanks) {
      refuse(ncclInvalidArgument, who + " passed nRanks = " + std::to_string(o.nRanks) + "; it must be larger than " +
                                      "the communicator's " + std::to_string(parentRanks) + " ranks and at most " +
                                      std::to_string(bootstrap::kMaxRanks));
    } else if (o.nRanks != offers[0].nRanks) {
      refuse(ncclInvalidArgument, "the existing ranks disagree on nRanks: rank 0 passed " +
                                      std::to_string(offers[0].nRanks) + ", rank " + std::to_string(r) + " passed " +
                                      std::to_string(o.nRanks));
    }
    switch (static_cast<GrowIdMatch>(o.match)) {
      case GrowIdMatch::kPending:
        holders.push_back(r);
        break;
      case GrowIdMatch::kUsed:
        refuse(ncclInvalidUsage, who + " passed a uniqueId that an earlier ncclCommGrow already used; an id grows "
                                       "once: ask ncclCommGetUniqueId for a new one");
        break;
      case GrowIdMatch::kForeign:
        foreign.push_back(r);  // (fine if it is the holder's id: NCCL lets every existing rank pass it)
        break;
      case GrowIdMatch::kNone:
        break;
    }
  }
  for (int r : foreign) {
    if (holders.size() == 1 && std::memcmp(&offers[r].id, &offers[holders.front()].id, sizeof(ncclUniqueId)) == 0) {
      continue;
    }
    refuse(ncclInvalidUsage, "existing rank " + std::to_string(r) + " passed a uniqueId that no existing rank's "
                             "ncclCommGetUniqueId made for this grow; the rank that asked for the id passes it, the "
                             "other existing ranks NULL (or the same id)");
  }
  if (holders.empty()) {
    refuse(ncclInvalidUsage, "no existing rank passed a grow id: the rank that called ncclCommGetUniqueId passes its "
                             "id to ncclCommGrow, the other existing ranks NULL");
  } else if (holders.size() > 1) {
    refuse(ncclInvalidUsage, "existing " + bootstrap::describeRanks(holders) + " each passed a grow id of their own; "
                             "one rank asks ncclCommGetUniqueId and passes the id, the others pass NULL");
  } else {
    v.id = offers[holders.front()].id;
  }
  return v;
}

/// Rank 0 of the parent gathers every existing rank's offer and sends all of them its verdict.
Verdict agree(Communicator& parent, const Offer& mine, uint32_t tag, const std::atomic<bool>* abortFlag) {
  bootstrap::Bootstrap& channel = parent.bootstrap();
  const int n = parent.identity().nRanks;
  if (parent.identity().rank != 0) {
    channel.send(0, tag, &mine, sizeof mine, abortFlag);
    Verdict v{};
    channel.recv(0, tag | kVerdictBit, &v, sizeof v, abortFlag);
    v.reason[sizeof v.reason - 1] = '\0';
    return v;
  }
  std::vector<Offer> offers(n);
  offers[0] = mine;
  for (int r = 1; r < n; ++r) channel.recv(r, tag, &offers[r], sizeof(Offer), abortFlag);
  const Verdict v = judge(offers);
  for (int r = 1; r < n; ++r) channel.send(r, tag | kVerdictBit, &v, sizeof v, abortFlag);
  return v;
}

/// One existing rank's part in a grow, for as long as it runs (the caller keeps the parent
/// alive): aborting the parent aborts the new communicator, no other grow id is handed out, and
/// the rank that held the id stops its root at the end and counts the id used.
class GrowOfParent {
 public:
  GrowOfParent(Communicator& parent, Communicator& child, bool holder)
      : parent_(parent), holder_(holder), rootTicket_(parent.growIds().begin(holder)) {
    parent.setAbortFollower(&child);
  }
  ~GrowOfParent() {
    parent_.setAbortFollower(nullptr);
    if (rootTicket_ != 0) bootstrap::stopRoot(rootTicket_);
    parent_.growIds().end(holder_);
  }
  GrowOfParent(const GrowOfParent&) = delete;
  GrowOfParent& operator=(const GrowOfParent&) = delete;

 private:
  Communicator& parent_;
  bool holder_;
  uint64_t rootTicket_;
};

}  // namespace

ncclUniqueId offerGrowId(Communicator& parent, const InitSettings& settings) {
  parent.growIds().checkCanOffer();  // (before a root starts)
  InitSettings local = settings;
  local.commIdEnv.clear();  // NCCL_COMM_ID names the first communicator's root only
  uint64_t ticket = 0;
  bootstrap::UniqueId id = bootstrap::UniqueId::decode(makeUniqueId(local, &ticket));
  id.grownFrom = parent.identity().nRanks;
  const ncclUniqueId encoded = id.encode();
  try {
    parent.growIds().offer(encoded, ticket);
  } catch (...) {
    bootstrap::stopRoot(ticket);  // (another thread asked at the same time)
    throw;
  }
  return encoded;
}

void growExistingRank(Communicator& parent, const GrowRequest& request, uint32_t sequence, Communicator& child,
                      const InitSettings& settings) {
  CallGuard keep(parent);  // (first: a nonblocking grow runs later, on the new communicator's thread)
  const GrowIdMatch match = parent.growIds().match(request.id);
  GrowOfParent grow(parent, child, match == GrowIdMatch::kPending);
  Offer mine{};
  mine.nRanks = request.nRanks;
  mine.rankArgument = request.rankArgument;
  mine.match = static_cast<int32_t>(match);
  if (request.id != nullptr) mine.id = *request.id;
  // The agreement watches the new communicator's flag, which the parent's abort also raises.
  const Verdict verdict = agree(parent, mine, kGrowTag + sequence, &child.abortFlag());
  if (verdict.code != ncclSuccess) fail(static_cast<ncclResult_t>(verdict.code), "%s", verdict.reason);
  child.setPosition(parent.identity().rank, request.nRanks);
  initRank(child, verdict.id, settings);
}

void checkNewRankOfGrow(const ncclUniqueId& id, int nRanks, int rank) {
  const bootstrap::UniqueId decoded = bootstrap::UniqueId::decode(id);
  const int from = decoded.grownFrom;
  if (from <= 0) {
    fail(ncclInvalidArgument, "uniqueId is not a grow id: new ranks pass the id that ncclCommGetUniqueId made on the "
         "communicator they join (ncclGetUniqueId's ids start new communicators)");
  }
  if (nRanks <= from || nRanks > bootstrap::kMaxRanks) {
    fail(ncclInvalidArgument, "nRanks is %d; the id grows a communicator of %d ranks, so it must be between %d and %d",
         nRanks, from, from + 1, bootstrap::kMaxRanks);
  }
  if (rank < from || rank >= nRanks) {
    fail(ncclInvalidArgument, "rank is %d; new ranks take %d..%d (the communicator being grown has ranks 0..%d)",
         rank, from, nRanks - 1, from - 1);
  }
  if (growIdUsed(id)) {
    fail(ncclInvalidUsage, "uniqueId was already used by an ncclCommGrow that has ended; an id grows once: the "
         "communicator's ncclCommGetUniqueId makes a new one");
  }
}

void growNewRank(Communicator& child, const ncclUniqueId& id, const InitSettings& settings) {
  struct MarkUsed {
    const ncclUniqueId& id;
    ~MarkUsed() { markGrowIdUsed(id); }
  } used{id};
  try {
    initRank(child, id, settings);
  } catch (const Error& e) {
    // The root lives in the process of the rank that asked for the id and ends with its grow:
    // a joiner that comes after a failed (or finished) grow finds it closed or gone.
    if (std::string(e.what()).find("could not rendezvous") == std::string::npos) throw;
    fail(e.code(), "%s (if the root of the grow id is gone, the existing ranks' ncclCommGrow with this id has "
         "already ended: ask for a new id)", e.what());
  }
}

}  // namespace braid::comm
