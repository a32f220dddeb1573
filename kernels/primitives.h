// Primitives: one FIFO step of data movement, written once per protocol.
//
// An algorithm is a sequence of steps; each step moves one slice (at most one FIFO slot) and
// names, by flags, what it combines:
//   kRecv    read the slice from the receive connection's current slot
//   kInput   read this rank's input (applying the op's pre step); reduced with kRecv's data
//   kPost    apply the op's post step (the slice is final)
//   kOutput  write the slice to this rank's output buffer
//   kSend    write the slice to the send connection's current slot
//   kPartial read `input` as a partial result already reduced (no pre step); reduced with
//            kRecv's data like kInput; alone with kSend, a copy of what is already final
// A send carries what the flags compute: kSend without kInput or kPartial (or kRecv) sends
// zeros under LL, so a plain copy of the input is kPartial|kSend.
//   kMineFirst  with kRecv and kInput/kPartial: reduce(mine, received) instead of
//            reduce(received, mine), so that two partners exchanging halves compute the same
//            bits (the lower rank's value always first)
// So NCCL's send is kInput|kSend, recvReduceSend kRecv|kInput|kSend, recvReduceCopySend
// kRecv|kInput|kPost|kOutput|kSend, recvCopySend kRecv|kOutput|kSend, recv kRecv|kOutput.
//
// Who calls: every thread of the group, with the same arguments. Ordering: the receiver reads
// a Simple slot only after an acquire load of `tail` shows it filled, and frees it with a
// release store of `head`; the sender reuses a slot only after an acquire load of `head`.
// LL needs no tail: each 8-byte half of a line carries its own flag (step + 1); the sender
// still publishes tail (with the step's size) for transports that forward whole steps.
// LL128 neither: each 128-byte line ends with an 8-byte flag (step + 1), stored with release
// after the line's 15 data words; the reader acquires the flag, then reads the data.
#pragma once

#include "kernels/reduce_copy.h"
#include "kernels/work.h"

namespace braid::kernels {

/// The slow half of waitReporting: out of line, so the step code around it stays small.
/// Records in status (not null) that the channel waits for `kind` of `step` on conn: a wait
/// for credits in its own note (a collective's send waiter waits beside thread 0).
BRAID_OUTLINE void noteWait(ChannelStatus* status, uint32_t kind, const ConnHandle* conn, uint64_t step) {
  if (kind == kWaitCredits) {
    storeRelaxed(&status->creditWait.step, step);
    storeRelaxed(&status->creditWait.peer, conn->peer);
    storeRelaxed(&status->creditWait.transport, static_cast<uint32_t>(conn->transport));
    storeRelease(&status->creditWait.kind, kind);
    return;
  }
  storeRelaxed(&status->waitStep, step);
  storeRelaxed(&status->waitPeer, conn->peer);
  storeRelaxed(&status->waitTransport, static_cast<uint32_t>(conn->transport));
  storeRelease(&status->waitKind, kind);
}

template <typename Ready>
BRAID_OUTLINE WaitResult waitRecorded(ChannelStatus* status, uint32_t kind, const ConnHandle* conn, uint64_t step,
                                   Ready ready, const uint32_t* abortFlag) {
  if (status != nullptr) noteWait(status, kind, conn, step);
  const WaitResult r = waitUntil(ready, abortFlag);
  if (status != nullptr)
    storeRelaxed(kind == kWaitCredits ? &status->creditWait.kind : &status->waitKind, static_cast<uint32_t>(kWaitNone));
  return r;
}

/// Thread 0 only. Records what the channel waits on while ready() is false, then waits.
template <typename Ready>
BRAID_INLINE WaitResult waitReporting(ChannelStatus* status, uint32_t kind, const ConnHandle* conn, uint64_t step,
                                      Ready ready, const uint32_t* abortFlag) {
  if (ready()) return WaitResult::kReady;
  return waitRecorded(status, kind, conn, step, ready, abortFlag);
}

/// Any thread: reads LL line `line` into payload once its halves carry `flag`. The first look
/// is inline, into the caller's registers; only a line not there yet goes to the out-of-line
/// wait, with an array of its own (had payload's address gone to it, payload would live in
/// local memory on a GPU whether or not the line had to be waited for). status: null, or the
/// channel's for the thread that reports its waits.
BRAID_INLINE WaitResult readLLLineWaiting(const LLLine* line, uint32_t flag, uint32_t payload[2], ChannelStatus* status,
                                          const ConnHandle* conn, uint64_t step, const uint32_t* abortFlag) {
  if (readLLLine(line, flag, payload)) return WaitResult::kReady;
  uint32_t waited[2] = {0, 0};
  const WaitResult r =
      waitRecorded(status, kWaitData, conn, step, [line, flag, &waited] { return readLLLine(line, flag, waited); }, abortFlag);
  payload[0] = waited[0];
  payload[1] = waited[1];
  return r;
}

/// The send waiter only: publishes the operation's signature in the slot of its first step on `conn`.
/// Must follow the wait for that slot's credits and precede its data.
BRAID_OUTLINE void writeSignature(const ConnHandle& conn, uint64_t firstStep, const OpSignature& sig) {
  if (sig.seq == 0) return;
  SigSlot* slot = conn.sigs + firstStep % kSteps;
  storeRelaxed(&slot->sig.seq, sig.seq);
  storeRelaxed(&slot->sig.words[0], sig.words[0]);
  storeRelaxed(&slot->sig.words[1], sig.words[1]);
  storeRelease(&slot->stamp, firstStep + 1);
}

/// Thread 0 only: waits for the sender's signature of the operation whose first step on
/// `conn` is firstStep and compares it with ours. On a difference it records the peer's in
/// status and returns kAborted (as it does when the communicator is aborted meanwhile).
BRAID_OUTLINE WaitResult checkSignature(const ConnHandle& conn, uint64_t firstStep, const OpSignature& mine,
                                       ChannelStatus* status, const uint32_t* abortFlag) {
  if (mine.seq == 0) return WaitResult::kReady;
  SigSlot* slot = conn.sigs + firstStep % kSteps;
  const WaitResult r = waitReporting(
      status, kWaitSignature, &conn, firstStep, [&] { return loadAcquire(&slot->stamp) == firstStep + 1; }, abortFlag);
  if (r != WaitResult::kReady) return r;
  OpSignature theirs;
  theirs.seq = loadRelaxed(&slot->sig.seq);
  theirs.words[0] = loadRelaxed(&slot->sig.words[0]);
  theirs.words[1] = loadRelaxed(&slot->sig.words[1]);
  if (theirs.seq == mine.seq && theirs.words[0] == mine.words[0] && theirs.words[1] == mine.words[1])
    return WaitResult::kReady;
  if (status != nullptr) {
    status->mismatchPeer = conn.peer;
    status->peerSig = theirs;
    storeRelease(&status->mismatch, static_cast<uint32_t>(kMismatchSignature));
  }
  return WaitResult::kAborted;
}

/// Thread 0 only: writes the watchdog's count of the channel's steps, `steps` past `base`, its
/// value as the operation began (kProgressUnknown: not read yet; it is read once, as host
/// memory on a GPU, and returned). Out of line and free of the Primitives object, whose
/// address would otherwise be taken and its fields kept in local memory.
constexpr uint64_t kProgressUnknown = ~uint64_t(0);
BRAID_OUTLINE uint64_t writeProgress(ChannelStatus* status, uint64_t base, uint64_t steps) {
  if (base == kProgressUnknown) base = loadRelaxed(&status->progress);
  storeRelaxed(&status->progress, base + steps);
  return base;
}

template <typename T, typename Red, typename Group>
class Primitives {
 public:
  /// send and recv may be null when the algorithm does not use that direction.
  /// work (null for purely local use) brings the signature to publish and check and the
  /// channel's status.
  BRAID_INLINE Primitives(Group& group, const ConnHandle* send, const ConnHandle* recv, Proto proto, const Red& red,
                          const uint32_t* abortFlag, const CollWork* work = nullptr)
      : g_(group), send_(send), recv_(recv), proto_(proto), red_(red), abort_(abortFlag), work_(work),
        status_(work != nullptr ? work->status : nullptr) {
    sendWaiter_ = g_.size() > kSendWaiter ? kSendWaiter : g_.size() / 2;
    sendStep_ = send_ != nullptr ? *send_->step : 0;
    recvStep_ = recv_ != nullptr ? *recv_->step : 0;
    if (send_ != nullptr && g_.rank() == sendWaiter_) headSeen_ = send_->step[kCreditsSeenWord];
    sigToWrite_ = work_ != nullptr && send_ != nullptr;
    sigPending_ = work_ != nullptr && recv_ != nullptr && work_->checkSig != 0 && work_->sig.seq != 0;
  }

  /// Elements one step can carry.
  BRAID_INLINE uint64_t sliceElements() const {
    const ConnHandle* c = send_ != nullptr ? send_ : recv_;
    return c == nullptr ? ~uint64_t(0) : stepElements(proto_, *c, sizeof(T));
  }

  /// One step over n elements (n may be 0: the step still advances, so both sides agree).
  /// Returns false once the communicator was aborted; later steps then do nothing.
  BRAID_INLINE bool step(uint32_t flags, const T* input, T* output, uint64_t n) {
    if (stopped_) return false;
    if (proto_ == Proto::kLL) {
      stepLL(flags, input, output, n);
    } else if (proto_ == Proto::kLL128) {
      stepLL128(flags, input, output, n);
    } else {
      stepSimple(flags, input, output, n);
    }
    return !stopped_;
  }

  /// Stores the step counters back (thread 0) and the credits seen (the send waiter, which
  /// reads them again in the next operation); call once after the last step.
  BRAID_INLINE void finish() {
    if (send_ != nullptr && g_.rank() == sendWaiter_) send_->step[kCreditsSeenWord] = headSeen_;
    if (g_.rank() != 0) return;
    if (send_ != nullptr) *send_->step = sendStep_;
    if (recv_ != nullptr) *recv_->step = recvStep_;
    reportProgress();
  }

 private:
  /// The element arithmetic shared by every protocol (reduce_copy.h's): v is the received
  /// value (if kRecv), input[i] this rank's (read only with kInput or kPartial).
  BRAID_INLINE T combine(uint32_t flags, T v, const T* input, uint64_t i) const {
    return combineValue<T>(red_, flags, v, (flags & (kInput | kPartial)) ? input[i] : T{});
  }

  /// Whether a step with these flags computes anything (else it copies what it reads).
  static BRAID_INLINE bool arithmetic(uint32_t flags) {
    return ((flags & kInput) && ((flags & kRecv) || Red::kHasPre)) || ((flags & kPartial) && (flags & kRecv)) ||
           (Red::kHasPost && (flags & kPost));
  }

  /// The line protocols (LL, LL128): the run of at most `most` elements from element `first`
  /// out of n (an LL line, a lane's share of an LL128 line; nothing past the end), its received
  /// words in `words`, combined with the input (flags) into `words` and the output. A copy moves
  /// the words as they are; arithmetic goes through the elements they hold. The loops run over
  /// the words' constant count, so that on a GPU they stay in registers.
  template <int kW>
  BRAID_INLINE void combineRun(uint32_t flags, uint64_t (&words)[kW], uint64_t first, uint64_t most, uint64_t n,
                               const T* input, T* output) const {
    if (first >= n) return;
    const uint64_t here = n - first < most ? n - first : most;
    if (!arithmetic(flags)) {  // a copy: whole bytes (the copying collectives run on bytes, 8 or 120 a line)
      if (!(flags & kRecv) && (flags & (kInput | kPartial))) loadRun(words, input + first, here * sizeof(T));
      if (flags & kOutput) storeRun(output + first, words, here * sizeof(T));
      return;
    }
    constexpr int kN = kW * 8 / sizeof(T);
    T vals[kN];
    memcpy(vals, words, sizeof vals);
    BRAID_UNROLL
    for (int j = 0; j < kN; ++j) {
      if (static_cast<uint64_t>(j) >= here) break;
      vals[j] = combine(flags, vals[j], input, first + j);
      if (flags & kOutput) output[first + j] = vals[j];
    }
    memcpy(words, vals, sizeof vals);
  }

  /// A copy's run of `bytes` (at most the words') from the user's buffer into words, and back:
  /// each whole word in one 8-byte access where the buffer is aligned to 8 (a run starts at an
  /// 8-byte offset of the data: LL lines carry 8 bytes, an LL128 lane 16 and the line 120, so
  /// an aligned buffer moves in words but for its last few bytes), else byte by byte, the bytes
  /// shifted into their word in registers (a GPU is little-endian, as the host). Words past
  /// `bytes` are left as they are.
  template <int kWords>
  static BRAID_INLINE void loadRun(uint64_t (&words)[kWords], const void* from, uint64_t bytes) {
    const bool aligned = (reinterpret_cast<uintptr_t>(from) & 7) == 0;
    const uint8_t* src = static_cast<const uint8_t*>(from);
    BRAID_UNROLL
    for (int k = 0; k < kWords; ++k) {
      const uint64_t at = 8 * static_cast<uint64_t>(k);
      if (at >= bytes) break;
      if (aligned && at + 8 <= bytes) {
        memcpy(&words[k], __builtin_assume_aligned(src + at, 8), 8);
        continue;
      }
      uint64_t w = 0;
      BRAID_UNROLL
      for (int b = 0; b < 8; ++b) {
        if (at + b < bytes) w |= static_cast<uint64_t>(src[at + b]) << (8 * b);
      }
      words[k] = w;
    }
  }
  template <int kWords>
  static BRAID_INLINE void storeRun(void* to, const uint64_t (&words)[kWords], uint64_t bytes) {
    const bool aligned = (reinterpret_cast<uintptr_t>(to) & 7) == 0;
    uint8_t* dst = static_cast<uint8_t*>(to);
    BRAID_UNROLL
    for (int k = 0; k < kWords; ++k) {
      const uint64_t at = 8 * static_cast<uint64_t>(k);
      if (at >= bytes) break;
      if (aligned && at + 8 <= bytes) {
        memcpy(__builtin_assume_aligned(dst + at, 8), &words[k], 8);
        continue;
      }
      BRAID_UNROLL
      for (int b = 0; b < 8; ++b) {
        if (at + b < bytes) dst[at + b] = static_cast<uint8_t>(words[k] >> (8 * b));
      }
    }
  }
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "loadRun and storeRun shift bytes little-endian");

  /// The waits before a step's data move, by two threads at once (NCCL's wait-receive and
  /// wait-send threads): thread 0 for the received step, the send waiter for a free slot. One
  /// barrier then tells the group whether either saw the communicator aborted (or a mismatch).
  /// In a group of one, thread 0 does both, in that order. needTail (Simple): the received step
  /// is there once tail says so, and must carry recvBytes.
  BRAID_INLINE void waitCredits(uint32_t flags, bool needTail, uint64_t recvBytes = 0) {
    WaitResult r = WaitResult::kReady;
    if ((flags & kRecv) && g_.rank() == 0) r = waitReceived(needTail, recvBytes);
    if ((flags & kSend) && g_.rank() == sendWaiter_ && r == WaitResult::kReady) r = waitSendable();
    stopped_ = g_.syncAny(r == WaitResult::kAborted);
  }

  /// Thread 0: the operation's first receive checks the sender's signature; a Simple step waits
  /// for tail, then checks the step's size.
  BRAID_INLINE WaitResult waitReceived(bool needTail, uint64_t recvBytes) {
    WaitResult r = WaitResult::kReady;
    if (sigPending_) {  // the operation's first receive: same collective?
      sigPending_ = false;
      r = checkSignature(*recv_, recvStep_, work_->sig, status_, abort_);
    }
    if (r == WaitResult::kReady && needTail) {
      const uint64_t want = recvStep_ + 1;
      r = waitFor(kWaitData, recv_, recvStep_, [&] { return loadAcquire(recv_->tail) >= want; });
      if (r == WaitResult::kReady) r = checkStepBytes(*recv_, recvStep_, recvBytes, status_);
    }
    return r;
  }

  /// The send waiter: a free slot for this step, then (the operation's first send) the
  /// signature in it.
  BRAID_INLINE WaitResult waitSendable() {
    WaitResult r = WaitResult::kReady;
    if (headSeen_ + kSteps <= sendStep_) {
      // Only when the credits seen last are used up is the receiver's counter read again.
      const uint64_t step = sendStep_;
      r = waitFor(kWaitCredits, send_, step, [&] { return (headSeen_ = loadAcquire(send_->head)) + kSteps > step; });
    }
    // Its slot is free only now (written any earlier, it could overwrite one the receiver has
    // yet to read).
    if (r == WaitResult::kReady && sigToWrite_) {
      sigToWrite_ = false;
      writeSignature(*send_, sendStep_, work_->sig);
    }
    return r;
  }

  /// The thread that waits for the send connection's credits: thread 32, in another warp than
  /// thread 0's, which meanwhile waits for the received step; in a group of 32 or fewer (a host
  /// channel's threads) the middle one, and in a group of one thread 0 itself.
  static constexpr int kSendWaiter = 32;

  /// info: the step's stepInfo (what the send slot now holds).
  /// abortedHere: this thread's own waits saw the communicator aborted (a line protocol's).
  /// One fence for the step, then head and tail relaxed: the group's barrier orders every
  /// thread's reads of the received slot and writes of the send slot before thread 0's fence,
  /// and the fence orders them before both words (a release fence before a relaxed store is
  /// that store's release: the sender's acquire of head, the receiver's of tail, synchronise
  /// with it). The receiver's head needs it too: without it the sender could refill the slot
  /// before this rank's reads of it were done. The step's size (network connections only) is a
  /// relaxed store before the fence, which carries it with tail.
  BRAID_INLINE void publish(uint32_t flags, uint64_t info, bool abortedHere = false) {
    stopped_ = g_.syncAny(abortedHere);
    if (g_.rank() == 0) {
      if (flags & kSend) recordStepSize(*send_, sendStep_, info);
      if (flags & (kRecv | kSend)) fenceRelease();
      if (flags & kRecv) storeRelaxed(recv_->head, recvStep_ + 1);
      if (flags & kSend) storeRelaxed(send_->tail, sendStep_ + 1);
      if (status_ != nullptr && (++progress_ & (kProgressEvery - 1)) == 0) reportProgress();
    }
    if (flags & kRecv) ++recvStep_;
    if (flags & kSend) ++sendStep_;
  }

  /// The watchdog's count of the channel's steps (ChannelStatus::progress) is written every
  /// kProgressEvery steps, before a wait that is not over at once (waitFor) and at the end
  /// (finish), not every step: on a GPU the status is host memory across the bus. It still
  /// moves while the channel moves, and stands still exactly where it waits. Thread 0 only.
  static constexpr uint64_t kProgressEvery = 16;
  BRAID_INLINE void reportProgress() {
    if (status_ == nullptr || progress_ == progressWritten_) return;
    progressBase_ = writeProgress(status_, progressBase_, progress_);
    progressWritten_ = progress_;
  }

  /// waitReporting, the steps so far reported first where ready() is not yet true (thread 0's:
  /// another thread's count is 0, and a send waiter's wait leaves the watchdog's count up to
  /// kProgressEvery - 1 steps behind while thread 0 does not wait too).
  template <typename Ready>
  BRAID_INLINE WaitResult waitFor(uint32_t kind, const ConnHandle* conn, uint64_t step, Ready ready) {
    if (ready()) return WaitResult::kReady;
    reportProgress();
    return waitRecorded(status_, kind, conn, step, ready, abort_);
  }

  BRAID_INLINE void stepSimple(uint32_t flags, const T* input, T* output, uint64_t n) {
    waitCredits(flags, true, n * sizeof(T));
    if (stopped_) return;
    const T* in = (flags & kRecv) ? reinterpret_cast<const T*>(simpleSlot(*recv_, recvStep_)) : nullptr;
    T* out = (flags & kSend) ? reinterpret_cast<T*>(simpleSlot(*send_, sendStep_)) : nullptr;
    if (kStridedShares) {  // the GPU: coalesced, 16 bytes at a time where aligned
      stepSimpleStrided(flags, in, out, input, output, n);
      publish(flags, stepInfo(n * sizeof(T), false));
      return;
    }
    uint64_t lo, count;
    partition(n, g_.size(), g_.rank(), 16, &lo, &count);
    if (!arithmetic(flags)) {
      // A pure copy: from the received slot or from the input, to the output and/or send slot.
      const T* from = (flags & kRecv) ? in + lo : input + lo;
      if ((flags & kOutput) && output + lo != from) memcpy(output + lo, from, count * sizeof(T));
      if (flags & kSend) memcpy(out + lo, from, count * sizeof(T));
    } else {
      for (uint64_t i = lo; i < lo + count; ++i) {
        const T v = combine(flags, (flags & kRecv) ? in[i] : T{}, input, i);
        if (flags & kOutput) output[i] = v;
        if (flags & kSend) out[i] = v;
      }
    }
    publish(flags, stepInfo(n * sizeof(T), false));
  }

  /// stepSimple's data movement on the GPU: thread t of s takes 16-byte packs t, t + s, ...,
  /// several per pass (reduce_copy.h); a pure copy in the widest words the pointers allow.
  BRAID_INLINE void stepSimpleStrided(uint32_t flags, const T* in, T* out, const T* input, T* output, uint64_t n) {
    const uint64_t rank = g_.rank(), size = g_.size();
    if (!arithmetic(flags)) {
      const T* from = (flags & kRecv) ? in : input;
      T* toOut = (flags & kOutput) && output != from ? output : nullptr;
      T* toSend = (flags & kSend) ? out : nullptr;
      copyStrided(reinterpret_cast<const char*>(from), reinterpret_cast<char*>(toOut), reinterpret_cast<char*>(toSend),
                  n * sizeof(T), rank, size);  // (kernels::copyStrided)
      return;
    }
    reduceCopyStrided<T>(red_, flags, (flags & kRecv) ? in : nullptr, (flags & (kInput | kPartial)) ? input : nullptr,
                         (flags & kOutput) ? output : nullptr, (flags & kSend) ? out : nullptr, n, rank, size);
  }

  /// Out of line (as stepLL128): a step is called at dozens of places in each algorithm, and
  /// inlining the line-by-line protocols into every one of them had cost most of the kernel
  /// units' build time (a unit's instantiation: 13.2 s with LL inline, 6.8 s without); a
  /// call per step costs nothing beside its flag polling. Simple stays inline: its
  /// element loop is vectorised for the flags each call site passes.
  BRAID_OUTLINE void stepLL(uint32_t flags, const T* input, T* output, uint64_t n) {
    waitCredits(flags, false);
    if (stopped_) return;
    constexpr uint64_t kPerLine = 8 / sizeof(T);
    const uint64_t lines = (n + kPerLine - 1) / kPerLine;
    LLLine* in = (flags & kRecv) ? recv_->ll + (recvStep_ % kSteps) * recv_->llStepLines : nullptr;
    LLLine* out = (flags & kSend) ? send_->ll + (sendStep_ % kSteps) * send_->llStepLines : nullptr;
    const uint32_t recvFlag = static_cast<uint32_t>(recvStep_ + 1);
    const uint32_t sendFlag = static_cast<uint32_t>(sendStep_ + 1);
    const Share share = shareOf(lines, g_.size(), g_.rank(), 1);
    bool abortedHere = false;
    for (uint64_t l = share.begin; l < share.end; l += share.stride) {
      uint64_t words[1] = {0};  // (the line's 8 bytes; zeros past the data, sent as received)
      if (flags & kRecv) {
        uint32_t payload[2];
        const WaitResult r =
            readLLLineWaiting(in + l, recvFlag, payload, g_.rank() == 0 ? status_ : nullptr, recv_, recvStep_, abort_);
        if (r == WaitResult::kAborted) {
          abortedHere = true;
          break;
        }
        memcpy(words, payload, sizeof(payload));
      }
      combineRun(flags, words, l * kPerLine, kPerLine, n, input, output);
      if (flags & kSend) {
        uint32_t payload[2];
        memcpy(payload, words, sizeof payload);
        writeLLLine(out + l, payload, sendFlag);
      }
    }
    publish(flags, stepInfo(lines * sizeof(LLLine), true), abortedHere);
  }

  /// Out of line, as stepLL. A line is moved by Group::kLineLanes threads together (on a GPU
  /// 8 lanes of a warp, 16 bytes each, so a warp moves 512 contiguous bytes; on the host one
  /// thread): each lane its words of the line, the last lane the line's last data word and its
  /// flag, stored with release once the line's lanes have written (lineSync). A receiving lane
  /// waits for the flag itself, then reads its words; the lanes of a line stop together
  /// (lineAny) when the communicator is aborted.
  BRAID_OUTLINE void stepLL128(uint32_t flags, const T* input, T* output, uint64_t n) {
    waitCredits(flags, false);
    if (stopped_) return;
    constexpr int kLanes = Group::kLineLanes;
    static_assert(kLanes >= 1 && 16 % kLanes == 0, "a line's 16 words split evenly between its lanes");
    constexpr uint64_t kLaneWords = 16 / kLanes;
    constexpr uint64_t kPerLine = kLL128DataWords * 8 / sizeof(T);
    const uint64_t lines = (n + kPerLine - 1) / kPerLine;
    LL128Line* in = (flags & kRecv) ? recv_->ll128 + (recvStep_ % kSteps) * recv_->ll128StepLines : nullptr;
    LL128Line* out = (flags & kSend) ? send_->ll128 + (sendStep_ % kSteps) * send_->ll128StepLines : nullptr;
    const uint64_t recvFlag = recvStep_ + 1;
    const uint64_t sendFlag = sendStep_ + 1;
    const int lane = g_.rank() % kLanes;
    const uint64_t firstWord = static_cast<uint64_t>(lane) * kLaneWords;
    const uint64_t dataWords = kLL128DataWords - firstWord < kLaneWords ? kLL128DataWords - firstWord : kLaneWords;
    const Share share = shareOf(lines, g_.size() / kLanes, g_.rank() / kLanes, 1);
    bool abortedHere = false;
    constexpr bool kWhole = kLinesLandWhole && kLaneWords == 2;  // (a lane's two words: one 16-byte access)
    for (uint64_t l = share.begin; l < share.end; l += share.stride) {
      uint64_t words[kLaneWords] = {};  // (the slot's side word by word: no byte loop on a GPU)
      if (kWhole && (flags & kRecv)) {
        if (!readLineWhole(in[l].words + firstWord, lane == kLanes - 1, recvFlag, words[0], words[kLaneWords - 1])) {
          abortedHere = true;
          break;
        }
      } else if (flags & kRecv) {
        uint64_t* flag = in[l].words + kLL128FlagWord;
        const WaitResult r = waitReporting(g_.rank() == 0 ? status_ : nullptr, kWaitData, recv_, recvStep_,
                                           [flag, recvFlag] { return loadAcquire(flag) == recvFlag; }, abort_);
        if (g_.lineAny(r == WaitResult::kAborted)) {
          abortedHere = true;
          break;
        }
        for (uint64_t k = 0; k < kLaneWords; ++k) {
          if (k < dataWords) words[k] = in[l].words[firstWord + k];
        }
      }
      combineRun(flags, words, l * kPerLine + firstWord * 8 / sizeof(T), dataWords * 8 / sizeof(T), n, input, output);
      if (kWhole && (flags & kSend)) {  // the line in one store of its lanes, the last one's second word its flag
        storePair(out[l].words + firstWord, words[0], lane == kLanes - 1 ? sendFlag : words[kLaneWords - 1]);
      } else if (flags & kSend) {
        for (uint64_t k = 0; k < kLaneWords; ++k) {
          if (k < dataWords) out[l].words[firstWord + k] = words[k];
        }
        g_.lineSync();  // (the line's words before its flag)
        if (lane == kLanes - 1) storeRelease(out[l].words + kLL128FlagWord, sendFlag);
      }
    }
    publish(flags, lines * sizeof(LL128Line) | kStepLL128, abortedHere);
  }

  /// stepLL128 where lines land whole (kLinesLandWhole, a lane's two words): the line's lanes
  /// each load their 16 bytes with one volatile access, again until the flag lane's second word
  /// is the step's flag (then every lane's words are that step's: the warp read the line whole);
  /// no acquire. The lanes leave together, with false when the communicator was aborted (the
  /// flag lane polls it every kAbortPollEvery passes, abortRaised, and tells the others, so
  /// that they agree). Thread 0 records a wait that is not over at once in the channel's status.
  BRAID_INLINE bool readLineWhole(const uint64_t* at, bool flagLane, uint64_t flag, uint64_t& lo, uint64_t& hi) {
    const bool reports = g_.rank() == 0 && status_ != nullptr;
    for (uint32_t spins = 0;; ++spins) {
      loadPair(at, &lo, &hi);
      if (!g_.lineAny(flagLane && hi != flag)) {
        if (spins > 0 && reports) storeRelaxed(&status_->waitKind, static_cast<uint32_t>(kWaitNone));
        return true;
      }
      if (spins == 0 && reports) noteWait(status_, kWaitData, recv_, recvStep_);
      if ((spins & (kAbortPollEvery - 1)) == kAbortPollEvery - 1 && g_.lineAny(flagLane && abortRaised(abort_)))
        return false;
      backOff(spins);
    }
  }

  Group& g_;
  const ConnHandle* send_;
  const ConnHandle* recv_;
  Proto proto_;
  Red red_;
  const uint32_t* abort_;
  const CollWork* work_;
  ChannelStatus* status_;
  bool sigPending_ = false;     ///< thread 0: the first receive still has to check the signature
  bool sigToWrite_ = false;     ///< the send waiter: the first send still has to publish the signature
  int sendWaiter_;              ///< the thread that waits for credits (kSendWaiter)
  uint64_t sendStep_;
  uint64_t recvStep_;
  uint64_t headSeen_ = 0;       ///< the send waiter: the receiver's head as last read (kept across operations: kCreditsSeenWord)
  uint64_t progress_ = 0;       ///< thread 0: the steps this operation took
  uint64_t progressWritten_ = 0;  ///< thread 0: progress_ as reportProgress last wrote it
  uint64_t progressBase_ = kProgressUnknown;  ///< thread 0: the status's progress as the operation began
  /// The group agreed at a barrier that the operation stops (the same in every thread: it
  /// changes only at syncAny, never by reading a flag another thread may set meanwhile).
  bool stopped_ = false;
};

/// The slice of a chain pipeline (ring Broadcast and Reduce, the tree): at most `slice` (a
/// FIFO slot), small enough that `total` makes 16 of them, but at least 16 KiB (whole 64-byte
/// lines). A chain of n ranks takes about slices + n - 2 slice times: a 1 MiB Broadcast in two
/// 512 KiB slots on 8 ranks takes four times its transfer. Measured on 2 CPUs (medians of 5,
/// 4 and 8 processes, Simple), whole slots against these slices: ring Broadcast 64 KiB-1 MiB
/// 1.7-2.9x faster, Tree AllReduce (nodes of 2) 1.2-2x, ring Reduce within noise, and all
/// alike at 16 MiB; 8 slices of at least 64 KiB gained less. Every rank computes the same
/// slice from the same total and slot.
template <typename T>
BRAID_INLINE uint64_t pipelineSlice(uint64_t slice, uint64_t total) {
  constexpr uint64_t kSlices = 16, kMinBytes = 16384;
  constexpr uint64_t line = sizeof(T) < 64 ? 64 / sizeof(T) : 1;
  uint64_t s = (total + kSlices - 1) / kSlices;
  s = s > kMinBytes / sizeof(T) ? s : kMinBytes / sizeof(T);
  s = (s + line - 1) / line * line;
  return s < slice ? s : slice;
}

/// Calls step(base, n) for consecutive slices [base, base+n) of [0, total), n <= slice,
/// stopping at the first step that returns false (abort). Returns whether all steps ran.
template <typename Step>
BRAID_INLINE bool forEachSlice(uint64_t total, uint64_t slice, Step step) {
  for (uint64_t base = 0; base < total; base += slice) {
    if (!step(base, total - base < slice ? total - base : slice)) return false;
  }
  return true;
}

}  // namespace braid::kernels
