// What the one-sided carriers between hosts share (the TCP links, one_sided_links.h; the net
// plugin's, plugin/one_sided_plugin.h; the verbs one, ib/one_sided_verbs.h): the frame an
// operation travels as, the target's check of a frame before a byte lands, the target's table
// of its windows by the ids peers name them with, and the record of peers whose path ended.
//
// Peers never learn each other's addresses: a frame names a window id and an offset, which the
// target resolves in its own WindowTable, under the table's lock, so that withdrawing a window
// waits for the bytes landing in it at that moment and no byte lands after.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

namespace braid::transport::onesided {

constexpr uint32_t kFrameMagic = 0x4f535242;  // "BRSO"
enum FrameType : uint32_t { kPut = 1, kSignal = 2, kBye = 3 };

/// One operation on a link, as the wire carries it (both ends have the same byte order).
struct FrameHeader {
  uint32_t magic;
  uint32_t type;  ///< FrameType
  int32_t ctx;    ///< the signal's context
  uint32_t reserved;
  uint64_t window;  ///< kPut: the target's window id
  uint64_t offset;  ///< kPut: where in the target's window the data lands
  uint64_t bytes;   ///< kPut: data bytes after the header
  uint64_t unused[3];
};
static_assert(sizeof(FrameHeader) == 64 && std::is_trivially_copyable_v<FrameHeader>);

/// A frame of `type` on context `ctx`, the rest zero.
FrameHeader frameOf(uint32_t type, int ctx);

/// What a carrier calls after a put's bytes have all landed in a window's buffer and before it
/// counts the put's signal, under the table's lock (a withdraw waits for it): the CUDA
/// backend's relay (datapath/one_sided_relay.h) publishes a host mirror of its device window and
/// copies [offset, offset + bytes) from it into the device here. Empty: nothing to do. What it
/// throws breaks the carrier's incoming links (the proxy thread's pump).
using Settle = std::function<void(uint64_t offset, uint64_t bytes)>;

/// A window as the target knows it.
struct WindowSpan {
  char* buffer;
  uint64_t size;
  Settle settle;
};

/// The target's check of a frame from rank `from`, before anything lands: "" when it may be
/// applied, else why not (naming the fields). `window` is the span the frame's id names (null:
/// no such window); `contexts` the communicator's count.
std::string checkFrame(const FrameHeader& h, int from, int contexts, const WindowSpan* window);

/// This rank's windows that peers' puts may name, by id.
class WindowTable {
 public:
  void publish(uint64_t id, void* buffer, uint64_t size, Settle settle = {});
  /// On return no byte lands in the window any more (waits for bytes landing in it now).
  void withdraw(uint64_t id);
  /// checkFrame of `h` against the window it names, as the table holds it now.
  std::string check(const FrameHeader& h, int from, int contexts);
  /// The target's step between a put's last byte landing and its signal: runs the settle of
  /// the window `h` names; false, with a warning naming `rank`, when that window was withdrawn
  /// meanwhile (the put is dropped, its signal not counted).
  bool settle(const FrameHeader& h, int rank);
  /// With the table locked: when the window `h` names is still there and `h` fits it (as
  /// check found), calls land(to) with `to` the address of byte `done` of h's payload in the
  /// window and returns true; false when the window went away (the caller drops the rest).
  template <class Land>
  bool landing(const FrameHeader& h, uint64_t done, Land&& land) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = windows_.find(h.window);
    if (it == windows_.end() || h.offset > it->second.size || h.bytes > it->second.size - h.offset)
      return false;
    land(it->second.buffer + h.offset + done);
    return true;
  }

 private:
  std::mutex mutex_;
  std::map<uint64_t, WindowSpan> windows_;
};

/// Which peers' paths to this rank have ended, and why: read by waits on any thread, marked
/// by whichever thread learns it. The first reason stays.
class LostPeers {
 public:
  explicit LostPeers(int nRanks);
  /// Cheap: one acquire load.
  bool lost(int peer) const { return lost_[peer].load(std::memory_order_acquire); }
  std::string reason(int peer) const;
  /// Marks `peer` lost with `why`, unless it already is; false then.
  bool mark(int peer, const std::string& why);

 private:
  std::unique_ptr<std::atomic<bool>[]> lost_;
  mutable std::mutex mutex_;
  std::vector<std::string> reasons_;
};

}  // namespace braid::transport::onesided
