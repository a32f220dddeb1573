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

struct PeerOp {
  ConnHandle conn;
  char* buffer;      ///< source (send) or destination (receive)
  uint64_t bytes;
  uint64_t done;     ///< bytes moved so far
  uint64_t step;     ///< this side's step counter while the operation runs
  Proto proto;
  bool isSend;
  bool isStarted;    ///< the CUDA peer kernel: step was read from the connection (set false by the host)
  bool direct;       ///< zero-copy: the sender writes straight into the receiver's buffer (one step; both ends agree)
  bool offered;      ///< direct receiver: its buffer's address is posted
};

/// A direct operation (PeerOp::direct; ranks that reach each other's memory, a message above
/// the LL range), one step of the connection whatever its size. The receiver posts its
/// buffer's address and size in conn.offer, tagged with its step + 1; the sender, once it sees
/// that tag, copies the message there (never more than the receiver's size) and publishes
/// tail = step + 1; the receiver, seeing tail, frees the step (head). One copy instead of two,
/// and no FIFO slot.
/// Receiver, the first half (one thread): posts the offer.
BRAID_INLINE void postDirectOffer(PeerOp& op) {
  storeRelaxed(op.conn.offer + 1, static_cast<uint64_t>(reinterpret_cast<uintptr_t>(op.buffer)));
  storeRelaxed(op.conn.offer + 2, op.bytes);
  storeRelease(op.conn.offer, op.step + 1);
  op.offered = true;
}
/// Sender: the receiver's buffer once it has posted it for this step, else null; *bytes: what
/// to copy there (the smaller of the two sizes).
BRAID_INLINE char* directTarget(const PeerOp& op, uint64_t* bytes) {
  if (loadAcquire(op.conn.offer) != op.step + 1) return nullptr;
  const uint64_t room = loadRelaxed(op.conn.offer + 2);
  *bytes = room < op.bytes ? room : op.bytes;
  return reinterpret_cast<char*>(static_cast<uintptr_t>(loadRelaxed(op.conn.offer + 1)));
}
/// Either end, once the message has moved (sender: copied; receiver: seen tail): ends the step.
BRAID_INLINE void finishDirect(PeerOp& op) {
  storeRelease(op.isSend ? op.conn.tail : op.conn.head, op.step + 1);
  op.done = op.bytes;
  ++op.step;
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
    storeRelaxed(&status->waitTransport, stalled->conn.transport);
    storeRelease(&status->waitKind, static_cast<uint32_t>(stalled->isSend ? kWaitCredits : kWaitData));
  }
}

/// One thread. Tries to move the next slice; returns true if it did.
BRAID_INLINE bool tryPeerStep(PeerOp& op) {
  if (op.done >= op.bytes) return false;
  if (op.direct) {
    if (op.isSend) {
      uint64_t n = 0;
      char* target = directTarget(op, &n);
      if (target == nullptr) return false;
      memcpy(target, op.buffer, n);
    } else if (!op.offered) {
      postDirectOffer(op);
      return true;
    } else if (loadAcquire(op.conn.tail) <= op.step) {
      return false;
    }
    finishDirect(op);
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
    } else {
      memcpy(op.conn.simple + slot * op.conn.simpleStepBytes, op.buffer + op.done, n);
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
      memcpy(op.buffer + op.done, op.conn.simple + slot * op.conn.simpleStepBytes, n);
    }
    storeRelease(op.conn.head, op.step + 1);
  }
  op.done += n;
  ++op.step;
  return true;
}

}  // namespace braid::kernels
