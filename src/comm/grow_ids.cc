#include "comm/grow_ids.h"

#include <cstring>
#include <vector>

#include "bootstrap/root.h"
#include "core/status.h"

namespace braid::comm {

namespace {

bool sameId(const ncclUniqueId& a, const ncclUniqueId& b) { return std::memcmp(&a, &b, sizeof a) == 0; }

/// Every id a grow of this process used. A few bytes per grow, for the life of the process.
struct UsedIds {
  std::mutex mutex;
  std::vector<ncclUniqueId> ids;
};

UsedIds& usedIds() {
  static UsedIds* used = new UsedIds;  // (never destroyed: grows may end during exit)
  return *used;
}

}  // namespace

GrowIds::~GrowIds() {
  if (rootTicket_ != 0) bootstrap::stopRoot(rootTicket_);
}

void GrowIds::checkCanOffer() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (pending_) {
    fail(ncclInvalidUsage, "this communicator already handed out a grow id that no ncclCommGrow has used yet; "
         "use it (or destroy the communicator) before asking for another");
  }
  if (growing_) fail(ncclInvalidUsage, "an ncclCommGrow of this communicator is still running; wait for it to end");
}

void GrowIds::offer(const ncclUniqueId& id, uint64_t rootTicket) {
  checkCanOffer();
  std::lock_guard<std::mutex> lock(mutex_);
  pending_ = true;
  id_ = id;
  rootTicket_ = rootTicket;
}

GrowIdMatch GrowIds::match(const ncclUniqueId* id) const {
  if (id == nullptr) return GrowIdMatch::kNone;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (pending_ && sameId(*id, id_)) return GrowIdMatch::kPending;
  }
  return growIdUsed(*id) ? GrowIdMatch::kUsed : GrowIdMatch::kForeign;
}

uint64_t GrowIds::begin(bool holder) {
  std::lock_guard<std::mutex> lock(mutex_);
  growing_ = true;
  if (!holder) return 0;
  const uint64_t ticket = rootTicket_;
  rootTicket_ = 0;
  return ticket;
}

void GrowIds::end(bool holder) {
  std::lock_guard<std::mutex> lock(mutex_);
  growing_ = false;
  if (!holder || !pending_) return;
  pending_ = false;
  markGrowIdUsed(id_);
}

bool growIdUsed(const ncclUniqueId& id) {
  UsedIds& used = usedIds();
  std::lock_guard<std::mutex> lock(used.mutex);
  for (const ncclUniqueId& u : used.ids) {
    if (sameId(u, id)) return true;
  }
  return false;
}

void markGrowIdUsed(const ncclUniqueId& id) {
  if (growIdUsed(id)) return;
  UsedIds& used = usedIds();
  std::lock_guard<std::mutex> lock(used.mutex);
  used.ids.push_back(id);
}

}  // namespace braid::comm
