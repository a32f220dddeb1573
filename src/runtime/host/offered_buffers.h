// Sends between processes straight into registered receive buffers: the hosts' side of the
// offering operations of kernels/algorithms/send_recv.h, with a device backend, on connections
// whose slots are the receiver's GPU memory (transport/shm with slotsShared).
//
// Receiver: a receive into a buffer that one live registration of the communicator holds
// (ncclCommRegister), and that the device can export (runtime::Device::exportBuffer: memory of
// ncclMemAlloc), is offered under a key of this communicator's for the allocation holding it,
// with the allocation's token and size and the buffer's offset there. When the last
// registration overlapping that allocation ends (ncclCommDeregister), its key is revoked on
// every such connection (transport::RevokeLine); a later registration there gets a new key.
//
// Sender: before each launch, a connection's revocations are applied, then the key last offered
// there, when new, is imported (fetched from the receiver's process and mapped); the launch's
// sends on that connection carry what is mapped then (none on a launch captured into a graph,
// which could replay after a mapping is gone). A revoked mapping is unmapped once every launch
// that may use it has run; a key that could not be imported, or was revoked, is never tried
// again on that connection.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "kernels/algorithms/send_recv.h"
#include "runtime/device.h"
#include "transport/fifo.h"

namespace braid::runtime::host {

class OfferedBuffers {
 public:
  /// The most buffers a sender maps per connection (a launch's sends carry them all).
  static constexpr size_t kMaxMapped = 16;

  OfferedBuffers(Device& device, int rank) : device_(device), rank_(rank) {}
  /// Unmaps every mapping; the caller has waited for its launches.
  ~OfferedBuffers();
  OfferedBuffers(const OfferedBuffers&) = delete;
  OfferedBuffers& operator=(const OfferedBuffers&) = delete;

  /// Receiver: op (an offering receive) gets its offer (key 0: its buffer is not one that
  /// `registered`, a live registration holding all of it, says is registered, or the device
  /// cannot export it), and the line gets this process's pid.
  void prepareReceive(kernels::PeerOp& op, bool registered);
  /// Sender, once per launch and connection (conn, to its receiver): applies revocations,
  /// imports the key last offered when new, and appends what is mapped to `table`; returns how
  /// many entries it appended (0 when `captured`).
  uint32_t prepareSend(const kernels::ConnHandle& conn, bool captured, std::vector<kernels::MappedBuffer>* table);
  /// Receiver: the registration of [buffer, buffer + bytes) ended; `overlapping(p, n)` says
  /// whether a live one still shares a byte with [p, p + n). Revokes on `lines` the keys of
  /// allocations no live registration overlaps any more.
  void registrationEnded(const void* buffer, size_t bytes, const std::function<bool(const void*, size_t)>& overlapping,
                         const std::vector<transport::RevokeLine*>& lines);
  /// Sender: buffers mapped now, and revoked ones not yet unmapped (tests).
  size_t mappedNow() const;

 private:
  struct Exported {
    uint64_t key;
    Device::BufferExport where;
  };
  struct Mapping {
    uint64_t key;
    char* base;
    uint64_t bytes;
  };
  struct Sending {  // one connection's sender
    std::vector<Mapping> live;
    std::set<uint64_t> refused;  // keys revoked, or not importable
    uint64_t revocationsSeen = 0;
  };
  struct Retired {
    char* base;
    uint64_t mark;  // the device's launchMark when it was revoked
  };
  /// Applies conn's new revocations to s.
  void applyRevocations(const kernels::ConnHandle& conn, Sending& s);
  /// Imports the key the receiver last offered on conn, unless known.
  void importOffered(const kernels::ConnHandle& conn, Sending& s);
  /// Unmaps the retired mappings whose launches have run.
  void sweep();

  Device& device_;
  int rank_;
  mutable std::mutex mutex_;
  uint64_t nextKey_ = 0;
  std::map<const char*, Exported> exported_;  // receiver: by allocation base
  std::map<const uint64_t*, Sending> sending_;  // sender: by the connection's offer line
  std::vector<Retired> retired_;
};

}  // namespace braid::runtime::host
