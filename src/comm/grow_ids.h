// The ids of ncclCommGrow: the one a communicator has handed out and not yet seen used, and
// the ones this process has seen used (an id grows one communicator, once).
#pragma once

#include <nccl.h>

#include <cstdint>
#include <mutex>

namespace braid::comm {

/// How the id an existing rank passes to ncclCommGrow relates to its communicator.
enum class GrowIdMatch : int32_t {
  kNone = 0,     ///< it passed NULL
  kPending = 1,  ///< ncclCommGetUniqueId made it on this communicator and no grow used it yet
  kUsed = 2,     ///< an earlier grow in this process used it
  kForeign = 3,  ///< not made by ncclCommGetUniqueId on this communicator
};

/// One communicator's grow id: at most one is handed out and unused at a time, and no new one
/// is handed out while a grow runs. Owns the id's root until a grow ends (success or not) or
/// the communicator goes, so an id nobody used leaves no thread or socket behind.
class GrowIds {
 public:
  GrowIds() = default;
  ~GrowIds();
  GrowIds(const GrowIds&) = delete;
  GrowIds& operator=(const GrowIds&) = delete;

  /// Records a new id and its root's ticket (bootstrap::stopRoot). Throws ncclInvalidUsage when
  /// an earlier id is still unused or a grow is running; the caller then stops the new root.
  void offer(const ncclUniqueId& id, uint64_t rootTicket);
  /// Throws ncclInvalidUsage when an id is unused or a grow is running (checked before a root starts).
  void checkCanOffer() const;
  GrowIdMatch match(const ncclUniqueId* id) const;
  /// A grow on this communicator begins: no id is offered until end(). Returns the pending
  /// id's root ticket when this rank holds it (`holder`), which the caller now owns.
  uint64_t begin(bool holder);
  /// The grow ended: a held id counts as used, in this process, from now on.
  void end(bool holder);

 private:
  mutable std::mutex mutex_;
  bool pending_ = false;
  bool growing_ = false;
  ncclUniqueId id_{};
  uint64_t rootTicket_ = 0;
};

/// Whether a grow of this process has already used `id` (ids of other processes are not known
/// here: a joiner with such an id finds its root gone).
bool growIdUsed(const ncclUniqueId& id);
void markGrowIdUsed(const ncclUniqueId& id);

}  // namespace braid::comm
