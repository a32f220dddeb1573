// One-sided operations across hosts on the CUDA backend: ncclPutSignal and ncclSignal to a rank
// that a carrier reaches (another host, or every peer with BRAID_ONE_SIDED_NET), stream-ordered
// as NCCL's, over a carrier that moves host bytes (TCP links, the net plugin:
// transport/net/one_sided_links.h).
//
// Origin. The call enqueues on the user's stream, after the rank's earlier work there: a copy of
// the source into pinned staging (so later work on the stream may overwrite the source), then a
// host function. The host function only hands the operation to the relay's sender thread (a
// CUDA callback must not call CUDA, nor block on the network); the sender gives the staged
// bytes to the carrier, in the order the host functions ran, and returns the staging to a pool.
// The stream does not wait for the network: as with NCCL, a put is complete at the origin once
// its source may be reused.
//
// Target. A window this rank registers is published to the carrier as a host mirror of the same
// size (pinned): the carrier lands a put's bytes there, then the settle step copies exactly the
// landed range into the device window on a stream of its own (Device::HostCopier) and returns
// once the copy has ended; only then does the carrier count the signal (a release add to the
// host word the stream's wait kernel polls with system-scope acquire). Data lands before its
// signal, on the device as on the host.
//
// Order: one sender per communicator and one ordered path per pair (a TCP stream, the plugin's
// one send comm) keep an origin's puts and signals in call order on a stream, so
// NCCL_WIN_STRICT_ORDERING asks for nothing more.
//
// Verbs is not used here: an RDMA write lands without the target's knowing where, so there is
// no moment to copy it into the device (that would need GPUDirect RDMA); on the CUDA backend a
// verbs network's one-sided operations go over TCP links instead (src/api/memory_api.cc).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/device.h"
#include "transport/net/one_sided_links.h"

namespace braid::datapath {

class OneSidedRelay final : public transport::onesided::Carrier {
 private:
  /// A put (staging non-null, or zero bytes) or a signal (isPut false) waiting for the sender.
  struct Operation {
    int peer;
    bool isPut;
    uint64_t window, offset, bytes;
    int ctx;
    std::shared_ptr<char> staging;
  };
 public:
  /// What a put or signal that failed on the sender thread reports (its text names the peer);
  /// not called for failures after an abort.
  using Failed = std::function<void(ncclResult_t code, const std::string& why)>;
  /// Carries through `inner` for the device `device` (the rank's: it must outlive every call
  /// but the destructor, which runs after the device has finished this rank's work).
  OneSidedRelay(std::unique_ptr<transport::onesided::Carrier> inner, runtime::Device& device,
                const uint32_t* abortWord, Failed failed);
  /// Sends what is still queued (a stream's host functions have all run by then), then closes
  /// the carrier and frees the mirrors and staging.
  ~OneSidedRelay() override;
  OneSidedRelay(const OneSidedRelay&) = delete;
  OneSidedRelay& operator=(const OneSidedRelay&) = delete;

  /// ncclPutSignal on `stream`: `bytes` of device memory `source` into `peer`'s window `window`
  /// at `offset`, then its signal on `ctx`. Throws ncclInvalidUsage on a stream being captured
  /// into a CUDA graph (a replay would put again), nothing enqueued.
  void putOnStream(int peer, uint64_t window, uint64_t offset, const void* source, uint64_t bytes, int ctx,
                   void* stream, const char* call) {
    enqueue(Operation{peer, true, window, offset, bytes, ctx, nullptr}, source, stream, call);
  }
  /// ncclSignal on `stream`.
  void signalOnStream(int peer, int ctx, void* stream, const char* call) {
    enqueue(Operation{peer, false, 0, 0, 0, ctx, nullptr}, nullptr, stream, call);
  }

  // Carrier: what the target side and the API's checks see. publishWindow publishes a mirror of
  // the device window (the settle given is the relay's own: callers give none).
  bool linked(int peer) const override { return inner_->linked(peer); }
  void publishWindow(uint64_t id, void* buffer, uint64_t size, transport::onesided::Settle settle) override;
  void withdrawWindow(uint64_t id) override;
  void put(int peer, uint64_t window, uint64_t offset, const void* data, uint64_t bytes, int ctx) override {
    inner_->put(peer, window, offset, data, bytes, ctx);
  }
  void signal(int peer, int ctx) override { inner_->signal(peer, ctx); }
  bool lost(int peer) const override { return inner_->lost(peer); }
  std::string lostReason(int peer) const override { return inner_->lostReason(peer); }
  uint64_t arrivals() const override { return inner_->arrivals(); }
  /// The carrier underneath (tests).
  transport::onesided::Carrier& inner() { return *inner_; }

 private:
  /// Enqueues op on `stream`: the copy of its `source` into staging, then its hand-off to the
  /// sender.
  void enqueue(Operation op, const void* source, void* stream, const char* call);
  /// Pinned staging of at least `bytes` (> 0): a free one from the pool, else a new one.
  std::shared_ptr<char> takeStaging(uint64_t bytes);
  void giveBackStaging(std::shared_ptr<char> staging, uint64_t bytes);
  void post(Operation op);
  void sendLoop();
  void carry(const Operation& op);

  runtime::Device& device_;
  const uint32_t* abortWord_;
  Failed failed_;
  std::unique_ptr<runtime::Device::HostCopier> copier_;
  std::mutex mirrorsMutex_;
  std::map<uint64_t, std::shared_ptr<char>> mirrors_;  // by window id
  std::mutex poolMutex_;
  std::multimap<uint64_t, std::shared_ptr<char>> pool_;  // free staging by size
  std::mutex queueMutex_;
  std::condition_variable queued_;
  std::deque<Operation> queue_;
  bool stop_ = false;
  // Last: the carrier goes first (no landing into a mirror after it), its sender before it.
  std::unique_ptr<transport::onesided::Carrier> inner_;
  std::thread sender_;
};

}  // namespace braid::datapath
