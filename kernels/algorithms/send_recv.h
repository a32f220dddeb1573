// Point-to-point: one send or receive of a byte range through a peer connection.
//
// Unlike collectives, a group's sends and receives must all progress together (a rank may
// send to its right while receiving from its left, each larger than a FIFO), so these are
// written as non-blocking steps: try() moves at most one FIFO slot and returns whether it
// could. The executor round-robins over all operations of a group until each is done.
// Both sides cut the message into the same slices (the sizes are equal by contract).
#pragma once

#include "kernels/work.h"

namespace braid::kernels {

/// A receiver's registered buffer that the sender's process maps (datapath/offered_buffers.h
/// imports them): the key the receiver offers it under, and where and how large it is here.
struct MappedBuffer {
  uint64_t key;
  char* base;
  uint64_t bytes;
  uint64_t reserved;
};

struct PeerOp {
  ConnHandle conn;
  char* buffer;      ///< source (send) or destination (receive)
  uint64_t bytes;
  uint64_t done;     ///< bytes moved so far
  uint64_t step;     ///< this side's step counter while the operation runs
  const MappedBuffer* mapped;  ///< offering sender: the receiver's registered buffers this process maps (nMapped)
  uint64_t offerKey;     ///< offering receiver: its buffer's registration as exported (0: none)
  uint64_t offerOffset;  ///< offering receiver: where the buffer starts in that export
  uint64_t offerSpan;    ///< offering receiver: the export's bytes
  uint64_t offerToken[2];  ///< offering receiver: the export's 128-bit token (runtime::Device::importBuffer's)
  uint32_t nMapped;
  Proto proto;
  bool isSend;
  bool isStarted;    ///< the CUDA peer kernel: step was read from the connection (set false by the host)
  bool direct;       ///< zero-copy: the sender writes straight into the receiver's buffer (one step; both ends agree)
  bool offers;       ///< an offering operation (below)
  bool offered;      ///< receiver: its offer is posted; offering sender: it has read the offer
  bool byReference;  ///< the host over sockets: a send's slots carry its bytes' address, a receive offers its buffer (below)
};

/// The words of a receiver's offer line (ConnHandle::offer): the tag (its step + 1) last.
enum OfferWord : int {
  kOfferTag = 0,
  kOfferAddress = 1,  ///< direct: the buffer's address; offering: its offset in the export
  kOfferBytes = 2,
  kOfferKey = 3,
  kOfferSpan = 4,
  kOfferServer = 5,   ///< written by the receiver's host: its process's descriptor server (core/fd_exchange.h)
  kOfferToken = 6,    ///< two words
  kOfferPid = 8,      ///< written by the receiver's host (for messages)
};

/// A direct operation (PeerOp::direct; ranks that reach each other's memory, a message above
/// the LL range), one step of the connection whatever its size. The receiver posts its
/// buffer's address and size in conn.offer, tagged with its step + 1; the sender, once it sees
/// that tag, copies the message there (never more than the receiver's size) and publishes
/// tail = step + 1; the receiver, seeing tail, frees the step (head). One copy instead of two,
/// and no FIFO slot.
///
/// An offering operation (PeerOp::offers; ranks of different processes whose connection keeps
/// its slots in the receiver's GPU memory, a message above the LL range) is the same where the
/// sender maps the receiver's buffer, and an ordinary one where not. The receiver posts an
/// offer {its buffer's offset in a registered export, bytes, the export's key, bytes and token}
/// (key 0: not a registered buffer it can export), then receives as usual, except that a
/// first step marked kStepDirect means that the whole message is in its buffer already. A
/// sender whose process maps some of this receiver's buffers (nMapped > 0) waits for the
/// offer: when it names one of them and the message fits, the sender copies the message there
/// and publishes one step marked kStepDirect; otherwise it sends through the slots. A sender
/// that maps none does not wait. The sender's host imports the keys it sees offered, for
/// later operations (the receiver's server id and pid are in the line too, written by its host).
///
/// Receiver, one thread: posts the offer (the caller then sets op.offered: on the GPU only once
/// every thread of the block has read it). The tag is cleared first, so that a host reading
/// the line (a seqlock) never takes half of one offer for a whole one.
BRAID_INLINE void postOffer(const PeerOp& op) {
  uint64_t* line = op.conn.offer;
  storeRelaxed(line + kOfferTag, uint64_t{0});
  fenceFull();
  const bool address = op.direct || op.byReference;
  storeRelaxed(line + kOfferAddress, address ? static_cast<uint64_t>(reinterpret_cast<uintptr_t>(op.buffer)) : op.offerOffset);
  storeRelaxed(line + kOfferBytes, op.bytes);
  storeRelaxed(line + kOfferKey, op.offerKey);
  storeRelaxed(line + kOfferSpan, op.offerSpan);
  storeRelaxed(line + kOfferToken, op.offerToken[0]);
  storeRelaxed(line + kOfferToken + 1, op.offerToken[1]);
  storeRelease(line + kOfferTag, op.step + 1);
}
/// Direct sender: the receiver's buffer once it has posted it for this step, else null; *bytes:
/// what to copy there (the smaller of the two sizes).
BRAID_INLINE char* directTarget(const PeerOp& op, uint64_t* bytes) {
  if (loadAcquire(op.conn.offer + kOfferTag) != op.step + 1) return nullptr;
  const uint64_t room = loadRelaxed(op.conn.offer + kOfferBytes);
  *bytes = room < op.bytes ? room : op.bytes;
  return reinterpret_cast<char*>(static_cast<uintptr_t>(loadRelaxed(op.conn.offer + kOfferAddress)));
}
/// Offering sender, once the offer for this step is posted (the tag read with acquire): where
/// to copy the message in the receiver's buffer, or null to send it through the slots. `entry`
/// is the mapped buffer of the offer's key (found by the caller), or null.
BRAID_INLINE char* offeredTarget(const PeerOp& op, const MappedBuffer* entry) {
  if (entry == nullptr) return nullptr;
  const uint64_t offset = loadRelaxed(op.conn.offer + kOfferAddress);
  const uint64_t room = loadRelaxed(op.conn.offer + kOfferBytes);
  if (room < op.bytes || offset > entry->bytes || entry->bytes - offset < op.bytes) return nullptr;
  return entry->base + offset;
}
/// Either end, once the message has moved (sender: copied; receiver: seen tail): ends the step.
/// An offering sender also marks the step direct, for the receiver.
BRAID_INLINE void finishDirect(PeerOp& op) {
  if (op.isSend) {
    if (op.offers) storeRelaxed(op.conn.sizes + op.step % kSteps, kStepDirect);
    storeRelease(op.conn.tail, op.step + 1);
  } else {
    storeRelease(op.conn.head, op.step + 1);
  }
  op.done = op.bytes;
  ++op.step;
}
/// Offering receiver, step `op.step` filled (tail read with acquire): whether the sender wrote
/// the whole message into the buffer.
BRAID_INLINE bool arrivedDirect(const PeerOp& op) {
  return op.done == 0 && (loadRelaxed(op.conn.sizes + op.step % kSteps) & kStepDirect) != 0;
}

/// A send by reference (PeerOp::byReference: the host backend, a socket connection, Simple)
/// copies nothing: each step's slot holds the address of its bytes in op.buffer, marked
/// kStepReference, and the proxy writes them to the socket from there. The buffer is the
/// user's again only once every step has left, so the operation ends when head reaches its
/// last step rather than when the last step is published.
///
/// A receive by reference posts its buffer as an offer (address, bytes, tagged with its first
/// step + 1), and the proxy reads each step of the operation whose header arrives after that
/// straight into its place in the buffer, marking the step kStepDirect in conn.sizes (it
/// writes every step's size there); steps that arrived earlier sit in their slots and are
/// copied as usual.
BRAID_INLINE bool peerOpDone(const PeerOp& op) {
  return op.done >= op.bytes && (!op.byReference || loadAcquire(op.conn.head) >= op.step);
}

/// Bytes one step of op carries.
BRAID_INLINE uint64_t peerSliceBytes(const PeerOp& op) {
  return op.proto == Proto::kLL ? uint64_t(op.conn.llStepLines) * 8 : op.conn.simpleStepBytes;
}

/// One thread of a send/receive loop, after each pass over its operations (spins: passes in a
/// row that moved nothing, counted after this one): tells the watchdog through `status` that
/// the operations moved, or, once they have stalled a while, what `stalled` (the first
/// unfinished one) waits for, so that a dead or stalled peer is named at once.
BRAID_INLINE void reportPeerPass(ChannelStatus* status, bool moved, uint32_t spins, const PeerOp* stalled) {
  if (moved) {
    storeRelaxed(&status->progress, loadRelaxed(&status->progress) + 1);
    storeRelaxed(&status->waitKind, static_cast<uint32_t>(kWaitNone));
  } else if (spins == 64 && stalled != nullptr) {
    storeRelaxed(&status->waitStep, stalled->step);
    storeRelaxed(&status->waitPeer, stalled->conn.peer);
    storeRelaxed(&status->waitTransport, static_cast<uint32_t>(stalled->conn.transport));
    storeRelease(&status->waitKind, static_cast<uint32_t>(stalled->isSend ? kWaitCredits : kWaitData));
  }
}

/// One thread. Tries to move the next slice; returns true if it did. A Simple step that arrived
/// over a network with another size than this side's slice is never taken: the difference is
/// recorded in `status` (checkStepBytes) and the operation stays where it is until the watchdog,
/// which reports it, aborts the communicator.
BRAID_INLINE bool tryPeerStep(PeerOp& op, ChannelStatus* status) {
  if (op.done >= op.bytes) return false;
  if ((op.direct || op.offers || op.byReference) && !op.isSend && !op.offered) {
    postOffer(op);
    op.offered = true;
    return true;
  }
  if (op.direct) {
    if (op.isSend) {
      uint64_t n = 0;
      char* target = directTarget(op, &n);
      if (target == nullptr) return false;
      memcpy(target, op.buffer, n);
    } else if (loadAcquire(op.conn.tail) <= op.step) {
      return false;
    }
    finishDirect(op);
    return true;
  }
  if (op.offers && op.isSend && op.nMapped > 0 && !op.offered) {
    if (loadAcquire(op.conn.offer + kOfferTag) != op.step + 1) return false;
    const uint64_t key = loadRelaxed(op.conn.offer + kOfferKey);
    const MappedBuffer* entry = nullptr;
    for (uint32_t i = 0; i < op.nMapped && key != 0; ++i)
      if (op.mapped[i].key == key) entry = &op.mapped[i];
    op.offered = true;
    if (char* target = offeredTarget(op, entry)) {
      memcpy(target, op.buffer, op.bytes);
      finishDirect(op);
    }
    return true;
  }
  const uint64_t slice = peerSliceBytes(op);
  const uint64_t n = op.bytes - op.done < slice ? op.bytes - op.done : slice;
  const uint64_t slot = op.step % kSteps;
  if (op.isSend) {
    if (loadAcquire(op.conn.head) + kSteps <= op.step) return false;
    if (op.proto == Proto::kLL) {
      LLLine* lines = op.conn.ll + slot * op.conn.llStepLines;
      const uint32_t flag = static_cast<uint32_t>(op.step + 1);
      for (uint64_t l = 0; l * 8 < n; ++l) {
        uint32_t payload[2] = {0, 0};
        const uint64_t here = n - l * 8 < 8 ? n - l * 8 : 8;
        memcpy(payload, op.buffer + op.done + l * 8, here);
        writeLLLine(lines + l, payload, flag);
      }
      publishStep(op.conn, op.step, stepInfo((n + 7) / 8 * sizeof(LLLine), true));
    } else if (op.byReference) {
      const char* from = op.buffer + op.done;
      memcpy(simpleSlot(op.conn, op.step), &from, sizeof from);
      publishStep(op.conn, op.step, stepInfo(n, false) | kStepReference);
    } else {
      memcpy(simpleSlot(op.conn, op.step), op.buffer + op.done, n);
      publishStep(op.conn, op.step, stepInfo(n, false));
    }
  } else {
    if (op.proto == Proto::kLL) {
      LLLine* lines = op.conn.ll + slot * op.conn.llStepLines;
      const uint32_t flag = static_cast<uint32_t>(op.step + 1);
      // Only when every line of the slice has arrived is it consumed (nothing is half-read).
      uint32_t payload[2];
      for (uint64_t l = 0; l * 8 < n; ++l) {
        if (!readLLLine(lines + l, flag, payload)) return false;
      }
      for (uint64_t l = 0; l * 8 < n; ++l) {
        readLLLine(lines + l, flag, payload);
        const uint64_t here = n - l * 8 < 8 ? n - l * 8 : 8;
        memcpy(op.buffer + op.done + l * 8, payload, here);
      }
    } else {
      if (loadAcquire(op.conn.tail) <= op.step) return false;
      if (op.offers && arrivedDirect(op)) {
        finishDirect(op);
        return true;
      }
      if (checkStepBytes(op.conn, op.step, n, status) != WaitResult::kReady) return false;
      if (!op.byReference || (loadRelaxed(op.conn.sizes + slot) & kStepDirect) == 0) {
        memcpy(op.buffer + op.done, simpleSlot(op.conn, op.step), n);
      }
    }
    storeRelease(op.conn.head, op.step + 1);
  }
  op.done += n;
  ++op.step;
  return true;
}

}  // namespace braid::kernels
