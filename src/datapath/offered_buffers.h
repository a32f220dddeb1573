// Sends between processes straight into registered receive buffers: the hosts' side of the
// offering operations of kernels/algorithms/send_recv.h, with a device backend, on connections
// whose slots are the receiver's GPU memory (transport/shm with slotsShared).
//
// Receiver: a receive into a buffer that one live registration of the communicator holds
// (ncclCommRegister), and that the device can export (runtime::Device::exportBuffer: memory of
// ncclMemAlloc), is offered under a key of this communicator's for the allocation holding it,
// with the allocation's token and size and the buffer's offset there. The keys offered now are
// published on every connection this rank has offered on (transport::OfferedKeys); when the
// last registration overlapping an allocation ends (ncclCommDeregister), its key leaves them;
// a later registration there gets a new key.
//
// Sender: before each launch, every connection's mappings whose keys the receiver no longer
// publishes are retired; then, for the launch's connections, the key last offered there, when
// published and not mapped yet, is imported (fetched from the receiver's process and mapped),
// and the launch's sends carry what is mapped (none on a launch captured into a graph, which
// could replay after a mapping is gone). A retired mapping is unmapped once every launch that
// may use it has run. A key that could not be imported is not tried again on that connection.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <tuple>
#include <vector>

#include "kernels/algorithms/send_recv.h"
#include "runtime/device.h"
#include "transport/fifo.h"

namespace braid::datapath {

using runtime::Device;

class OfferedBuffers {
 public:
  /// The most buffers a sender maps per connection (a launch's sends carry them all).
  static constexpr size_t kMaxMapped = 16;

  OfferedBuffers(Device& device, int rank) : device_(device), rank_(rank) {}
  /// Unmaps every mapping; the caller has waited for its launches.
  ~OfferedBuffers();
  OfferedBuffers(const OfferedBuffers&) = delete;
  OfferedBuffers& operator=(const OfferedBuffers&) = delete;

  /// Receiver: op (an offering receive) gets its offer, and the line this process's pid. Key 0
  /// unless `registered()` (asked under this object's lock, so that a registration ending
  /// meanwhile is seen by one side or the other) says a live registration holds all of op's
  /// buffer and the device can export it.
  void prepareReceive(kernels::PeerOp& op, const std::function<bool()>& registered);
  /// Sender, before a launch: retires the mappings no longer offered on any connection, and
  /// unmaps retired ones whose launches have run.
  void refresh();
  /// Sender, once per launch and connection (conn, to its receiver): imports the key last
  /// offered when new, and appends what is mapped to `table`; returns how many entries it
  /// appended (0 when `captured`).
  uint32_t prepareSend(const kernels::ConnHandle& conn, bool captured, std::vector<kernels::MappedBuffer>* table);
  /// Receiver: the registration of [buffer, buffer + bytes) ended; `overlapping(p, n)` says
  /// whether a live one still shares a byte with [p, p + n). Withdraws the keys of allocations
  /// no live registration overlaps any more.
  void registrationEnded(const void* buffer, size_t bytes, const std::function<bool(const void*, size_t)>& overlapping);
  /// Sender: imports mapped now, retired ones not yet unmapped included (tests); connections to
  /// one peer offered the same export share one.
  size_t mappedNow() const;

 private:
  struct Exported {
    uint64_t key;
    Device::BufferExport where;
  };
  /// What one import maps, shared by the connections (sets) to one peer that are offered the
  /// same export: the peer, the exporting process's descriptor server and the export's token
  /// and size.
  using Source = std::tuple<int, uint64_t, uint64_t, uint64_t, uint64_t>;
  struct Shared {
    char* base;
    int users;  // live mappings and retired ones not yet released
  };
  struct Mapping {
    uint64_t key;
    char* base;
    uint64_t bytes;
    Source source;
  };
  struct Sending {  // one connection's sender
    transport::OfferedKeys* keys = nullptr;
    std::vector<Mapping> live;
    std::set<uint64_t> refused;  // keys that could not be imported
  };
  struct Retired {
    Source source;
    uint64_t mark;  // the device's launchMark when it was retired
  };
  /// Receiver: writes the keys offered now into every line that has had an offer.
  void publish();
  /// Sender: retires s's mappings whose keys `offered` (the receiver's keys now) lacks.
  void retireWithdrawn(Sending& s, const std::vector<uint64_t>& offered);
  /// Sender: imports the key the receiver last offered on conn, unless known, when `offered`
  /// has it.
  void importOffered(const kernels::ConnHandle& conn, Sending& s, const std::vector<uint64_t>& offered);
  /// Unmaps the retired mappings whose launches have run.
  void sweep();

  Device& device_;
  int rank_;
  mutable std::mutex mutex_;
  uint64_t nextKey_ = 0;
  std::map<const char*, Exported> exported_;        // receiver: by allocation base
  std::set<transport::OfferedKeys*> lines_;         // receiver: where it has offered
  std::map<const uint64_t*, Sending> sending_;      // sender: by the connection's offer line
  std::vector<Retired> retired_;
  std::map<Source, Shared> shared_;                 // sender: every import mapped now
};

}  // namespace braid::datapath
