#include "datapath/watchdog.h"

#include <signal.h>
#include <strings.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "bootstrap/bootstrap.h"
#include "core/log.h"
#include "core/params.h"
#include "datapath/signature.h"

namespace braid::datapath {

namespace {

constexpr auto kTick = std::chrono::milliseconds(50);
constexpr auto kLivenessEvery = std::chrono::milliseconds(500);
// A peer found gone fails the operation in flight once nothing has moved for this long (or at
// once, when a channel waits on that very peer).
constexpr auto kGoneGrace = std::chrono::seconds(10);
/// How long a wait that names an exited peer must also have seen no progress before it fails:
/// the peer may have sent its last data and exited, and the waiting thread, on oversubscribed
/// CPUs, not yet run to see it (256 rank processes on 2 CPUs showed it).
constexpr auto kExitedWaitGrace = std::chrono::seconds(1);
/// A point-to-point call that has not moved for this long asks the peer it waits on what it is
/// doing (checkWaitedPeers), and again at this interval while it waits.
constexpr auto kInquireAfter = std::chrono::seconds(1);
constexpr auto kInquireEvery = std::chrono::seconds(2);
/// A rank asked that long ago without answering is silent (an answer takes a tick, 50 ms).
constexpr auto kSilentAfter = std::chrono::milliseconds(500);
/// A rank's answer to an inquiry (bootstrap::Bootstrap::Answer's bytes): the operation it is in.
struct InquiryAnswer {
  uint32_t magic;
  uint32_t inFlight;
  int32_t waitingOn;  ///< the rank it waits on, or -1
  uint32_t flags;     ///< kOwesAsker, or 0 (other bits: not an answer of ours)
  kernels::OpSignature sig;
  char name[24];
};
static_assert(sizeof(InquiryAnswer) == bootstrap::Bootstrap::kAnswerBytes);
constexpr uint32_t kAnswerMagic = 0x57444131;  // "WDA1"
/// The answering rank still has send/recv data on its way to the rank that asked (its sends
/// completed locally, the steps not yet freed by the asker): the asker is not deadlocked on it
/// (a net plugin that finishes connecting in its first send stalls it for seconds).
constexpr uint32_t kOwesAsker = 1;

std::atomic<unsigned> gDumpRequests{0};

void onDumpSignal(int) { gDumpRequests.fetch_add(1, std::memory_order_relaxed); }

int parseSignal(const std::string& text) {
  static const struct {
    const char* name;
    int number;
  } known[] = {{"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"HUP", SIGHUP}, {"QUIT", SIGQUIT}, {"URG", SIGURG}};
  std::string name = text;
  if (strncasecmp(name.c_str(), "SIG", 3) == 0) name = name.substr(3);
  for (const auto& k : known)
    if (strcasecmp(name.c_str(), k.name) == 0) return k.number;
  char* end = nullptr;
  long n = strtol(text.c_str(), &end, 10);
  if (!text.empty() && *end == '\0' && n > 0 && n < NSIG && n != SIGKILL && n != SIGSTOP) return static_cast<int>(n);
  return -1;
}

void installDumpHandler(int sig) {
  static std::once_flag once;
  std::call_once(once, [sig] {
    struct sigaction sa {};
    sa.sa_handler = onDumpSignal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(sig, &sa, nullptr);
    BRAID_INFO(log::kInit, "BRAID_DUMP_ON_SIGNAL: signal %d logs what every communicator is waiting for", sig);
  });
}

const char* transportName(uint32_t kind) {
  switch (static_cast<transport::Kind>(kind)) {
    case transport::Kind::kP2p: return "P2P/in-process";
    case transport::Kind::kShm: return "SHM";
    case transport::Kind::kSocket: return "NET/Socket";
    case transport::Kind::kIb: return "NET/IB";
    case transport::Kind::kPlugin: return "NET/Plugin";
  }
  return "unknown transport";
}

/// Logs at WARN; when logging is off, on stderr, so a report asked for is never lost.
void emit(const std::string& text) {
  if (log::enabled(log::Level::Warn, log::kAll)) {
    BRAID_WARN("%s", text.c_str());
  } else {
    fprintf(stderr, "%s\n", text.c_str());
  }
}

}  // namespace

WatchdogSettings WatchdogSettings::fromParams() {
  auto& p = params::process();
  WatchdogSettings s;
  int64_t timeout = p.integer("NCCL_TIMEOUT");
  if (timeout == 0) timeout = p.integer("BRAID_TIMEOUT");
  if (timeout < 0 || timeout > 86400 * 365) {
    BRAID_WARN("NCCL_TIMEOUT=%lld is not a number of seconds; no timeout", static_cast<long long>(timeout));
    timeout = 0;
  }
  s.timeoutSeconds = static_cast<int>(timeout);
  const int64_t warn = p.integer("BRAID_WAIT_WARN");
  if (warn < 0 || warn > 86400 * 365) {
    BRAID_WARN("BRAID_WAIT_WARN=%lld is not a number of seconds; using 30", static_cast<long long>(warn));
  }
  s.warnAfterSeconds = warn < 0 || warn > 86400 * 365 ? 30 : static_cast<int>(warn);
  const std::string sig = p.string("BRAID_DUMP_ON_SIGNAL");
  if (!sig.empty()) {
    s.dumpSignal = parseSignal(sig);
    if (s.dumpSignal < 0) {
      BRAID_WARN("BRAID_DUMP_ON_SIGNAL=\"%s\" is not a signal (SIGUSR1, SIGUSR2, SIGHUP, SIGQUIT, SIGURG or a number)",
                 sig.c_str());
      s.dumpSignal = 0;
    }
  }
  return s;
}

Watchdog::Watchdog(int rank, int nRanks, uint64_t commHash, std::vector<PeerProcess> watched,
                   const transport::Connector& connector, kernels::ChannelStatus* statuses, int nStatuses,
                   std::function<void(ncclResult_t)> onFailure, WatchdogSettings settings,
                   std::function<bool()> deviceBusy, bootstrap::Bootstrap* channel)
    : rank_(rank),
      nRanks_(nRanks),
      commHash_(commHash),
      watched_(std::move(watched)),
      connector_(connector),
      statuses_(statuses),
      nStatuses_(nStatuses),
      onFailure_(std::move(onFailure)),
      settings_(settings),
      deviceBusy_(std::move(deviceBusy)),
      channel_(channel) {
  if (settings_.dumpSignal > 0) installDumpHandler(settings_.dumpSignal);
  if (channel_ != nullptr) {
    channel_->setAnswerer([this](int asker) {
      const OpView op = currentOp();
      InquiryAnswer a{};
      a.magic = kAnswerMagic;
      a.inFlight = op.inFlight ? 1 : 0;
      a.waitingOn = op.inFlight ? waitedPeer() : -1;
      a.flags = connector_.sendsPendingTo(asker) ? kOwesAsker : 0;
      a.sig = op.sig;
      snprintf(a.name, sizeof a.name, "%s", op.name);
      bootstrap::Bootstrap::Answer bytes;
      std::memcpy(bytes.data(), &a, sizeof a);
      return bytes;
    });
  }
  dumpsSeen_ = gDumpRequests.load();
  thread_ = std::thread([this] { loop(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
  if (channel_ != nullptr) channel_->setAnswerer(nullptr);
}

namespace {
/// A channel's waits as its kernel noted them: thread 0's (data, a signature, a send's
/// credits), then a collective's send waiter's (credits, waiting beside thread 0); kind
/// kWaitNone where none.
struct NotedWait {
  uint32_t kind;
  uint64_t step;
  int32_t peer;
  uint32_t transport;
};
constexpr int kNotedWaits = 2;
NotedWait notedWait(const kernels::ChannelStatus& status, int which) {
  auto* s = const_cast<kernels::ChannelStatus*>(&status);
  if (which == 0)  // (the kind first, with acquire: then the words written before it; braces evaluate in order)
    return {kernels::loadAcquire(&s->waitKind), kernels::loadRelaxed(&s->waitStep), kernels::loadRelaxed(&s->waitPeer),
            kernels::loadRelaxed(&s->waitTransport)};
  return {kernels::loadAcquire(&s->creditWait.kind), kernels::loadRelaxed(&s->creditWait.step),
          kernels::loadRelaxed(&s->creditWait.peer), kernels::loadRelaxed(&s->creditWait.transport)};
}
}  // namespace

void Watchdog::begin(const kernels::OpSignature& sig, const char* name, int nChannels) {
  for (int c = 0; c < nChannels && c < nStatuses_; ++c) {
    kernels::storeRelaxed(&statuses_[c].waitKind, static_cast<uint32_t>(kernels::kWaitNone));
    kernels::storeRelaxed(&statuses_[c].creditWait.kind, static_cast<uint32_t>(kernels::kWaitNone));
    kernels::storeRelaxed(&statuses_[c].mismatch, 0u);
  }
  token_.fetch_add(1, std::memory_order_acq_rel);  // odd: fields being written
  opSeq_.store(sig.seq, std::memory_order_relaxed);
  opWord0_.store(sig.words[0], std::memory_order_relaxed);
  opWord1_.store(sig.words[1], std::memory_order_relaxed);
  opName_.store(name, std::memory_order_relaxed);
  token_.fetch_add(2, std::memory_order_release);  // still odd: in flight, fields complete
}

void Watchdog::end() { token_.fetch_add(1, std::memory_order_release); }

void Watchdog::watchNeighbour(const kernels::OpSignature* fromPrev, int prevRank) {
  std::lock_guard<std::mutex> lock(mutex_);
  fromPrev_ = fromPrev;
  prevRank_ = prevRank;
}

Watchdog::OpView Watchdog::currentOp() const {
  OpView v;
  for (int attempt = 0; attempt < 100; ++attempt) {
    const uint64_t before = token_.load(std::memory_order_acquire);
    v.sig.seq = opSeq_.load(std::memory_order_relaxed);
    v.sig.words[0] = opWord0_.load(std::memory_order_relaxed);
    v.sig.words[1] = opWord1_.load(std::memory_order_relaxed);
    v.name = opName_.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (token_.load(std::memory_order_relaxed) == before) {
      v.token = before;
      v.inFlight = before % 4 == 3;  // begin adds 1 then 2, end adds 1: 3 mod 4 while running
      // Enqueued on a GPU: the last operation called is still in flight while kernels run.
      if (!v.inFlight && deviceBusy_ && deviceBusy_()) v.inFlight = true;
      return v;
    }
  }
  v.inFlight = false;
  return v;
}

void Watchdog::observe(const OpView& op) {
  // A new operation, or a GPU's kernel that has just started after waiting in its queue: the
  // clocks count from now.
  const bool restart = op.token != seenToken_ || (op.inFlight && !seenInFlight_);
  seenInFlight_ = op.inFlight;
  if (!restart) return;
  seenToken_ = op.token;
  nextWarnAfter_ = std::chrono::seconds(settings_.warnAfterSeconds);
  opStart_ = lastProgressAt_ = std::chrono::steady_clock::now();
  lastProgress_ = 0;
  for (int c = 0; c < nStatuses_; ++c) lastProgress_ += kernels::loadRelaxed(&statuses_[c].progress);
}

void Watchdog::fail(ncclResult_t code, const std::string& text) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (failed_) return;
    failed_ = true;
    failCode_ = code;
    failText_ = text;
  }
  connector_.forEachEnd([&](const transport::Connector::End& end) {
    transport::FaultBox* box = end.memory->faultBox(end.isSend);
    box->rank = rank_;
    box->code = static_cast<uint32_t>(code);
    snprintf(box->text, sizeof box->text, "%s", text.c_str());
    kernels::storeRelease(&box->raised, transport::kFaultRaised);
  });
  onFailure_(code);
}

void Watchdog::depart(const std::string& text) {
  connector_.forEachEnd([&](const transport::Connector::End& end) {
    transport::FaultBox* box = end.memory->faultBox(end.isSend);
    if (kernels::loadAcquire(&box->raised) != 0) return;
    box->rank = rank_;
    box->code = static_cast<uint32_t>(ncclRemoteError);
    snprintf(box->text, sizeof box->text, "%s", text.c_str());
    kernels::storeRelease(&box->raised, transport::kFaultLeft);
  });
}

bool Watchdog::failure(ncclResult_t* code, std::string* text) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!failed_) return false;
  *code = failCode_;
  *text = failText_;
  return true;
}

bool Watchdog::checkMismatch() {
  for (int c = 0; c < nStatuses_; ++c) {
    const kernels::ChannelStatus& s = statuses_[c];
    const uint32_t kind = kernels::loadAcquire(const_cast<uint32_t*>(&s.mismatch));
    if (kind == kernels::kMismatchNone) continue;
    if (kind == kernels::kMismatchStepSize) {  // (reported like a connection that broke)
      fail(ncclRemoteError, stepSizeText(rank_, s.mismatchPeer, transportName(s.mismatchTransport), s.badStep,
                                         s.badStepWanted, s.badStepGot));
      return true;
    }
    fail(ncclInvalidUsage, mismatchText(rank_, currentOp().sig, s.mismatchPeer, s.peerSig));
    return true;
  }
  return false;
}

std::string Watchdog::report() const {
  char buf[256];
  snprintf(buf, sizeof buf, "Braid hang report: comm %#llx rank %d of %d: ", static_cast<unsigned long long>(commHash_),
           rank_, nRanks_);
  std::string out = buf;
  const OpView op = currentOp();
  if (op.inFlight) {
    const double running = op.token == seenToken_
                               ? std::chrono::duration<double>(std::chrono::steady_clock::now() - opStart_).count()
                               : 0.0;
    snprintf(buf, sizeof buf, "%s op #%llu %s running for %.1f s", op.name, static_cast<unsigned long long>(op.sig.seq),
             op.sig.seq ? describeSignature(op.sig).c_str() : "(send/receive)", running);
    out += buf;
  } else {
    // Nothing runs on the host; kernels enqueued on a GPU may still wait (their channels below).
    out += "idle (no operation running on the host)";
  }
  for (int c = 0; c < nStatuses_ * kNotedWaits; ++c) {
    const kernels::ChannelStatus& s = statuses_[c / kNotedWaits];
    const NotedWait wait = notedWait(s, c % kNotedWaits);
    const uint64_t progress = kernels::loadRelaxed(const_cast<uint64_t*>(&s.progress));
    if (wait.kind == kernels::kWaitNone) continue;
    const char* what = wait.kind == kernels::kWaitData      ? "data from"
                       : wait.kind == kernels::kWaitCredits ? "free slots (credits) from"
                                                            : "the collective's signature from";
    snprintf(buf, sizeof buf, "; channel %d: step %llu waiting for %s rank %d over %s (%llu steps done)", c / kNotedWaits,
             static_cast<unsigned long long>(wait.step), what, wait.peer, transportName(wait.transport),
             static_cast<unsigned long long>(progress));
    out += buf;
  }
  return out;
}

void Watchdog::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  bool warned = false;
  while (!stop_) {
    wake_.wait_for(lock, kTick);
    if (stop_) break;
    lock.unlock();
    try {
      tick();
    } catch (const std::exception& e) {  // (a thread of ours must not end the process)
      if (!warned) BRAID_WARN("rank %d: the watchdog: %s", rank_, e.what());
      warned = true;
    }
    lock.lock();
  }
}

void Watchdog::tick() {
  // One view of the operation for the whole tick: a GPU kernel starting between two looks
  // would otherwise meet clocks that observe() had not restarted.
  const OpView op = currentOp();
  observe(op);
  neighbourSuspect_ = -1;  // (checkNeighbour names it again while it holds)
  const unsigned dumps = gDumpRequests.load(std::memory_order_relaxed);
  if (dumps != dumpsSeen_) {
    dumpsSeen_ = dumps;
    emit(report());
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (failed_) return;
  }
  if (checkMismatch()) return;
  trackProgress();
  checkNeighbour(op);
  checkWaitedPeers(op);
  checkFaultBoxes(op);
  checkPeersAlive(op);
  checkLongWait(op);
  checkTimeout(op);
}

void Watchdog::trackProgress() {
  uint64_t progress = 0;
  for (int c = 0; c < nStatuses_; ++c) progress += kernels::loadRelaxed(&statuses_[c].progress);
  if (progress != lastProgress_) {
    lastProgress_ = progress;
    lastProgressAt_ = std::chrono::steady_clock::now();
    nextWarnAfter_ = std::chrono::seconds(settings_.warnAfterSeconds);
  }
}

bool Watchdog::stuckOn(int peer) const {
  if (connector_.setupWaitingOn() == peer) return true;  // connecting to it, or waiting for its descriptor
  const auto still = std::chrono::steady_clock::now() - lastProgressAt_;
  for (int c = 0; c < nStatuses_ * kNotedWaits && still >= kExitedWaitGrace; ++c) {
    const NotedWait wait = notedWait(statuses_[c / kNotedWaits], c % kNotedWaits);
    if (wait.kind != kernels::kWaitNone && wait.peer == peer) return true;
  }
  return still >= kGoneGrace;
}

void Watchdog::checkFaultBoxes(const OpView& op) {
  int from = -1;
  uint32_t kind = 0;
  std::string text;
  const bool inFlight = op.inFlight;
  const size_t first = faultCursor_;
  const size_t ends = connector_.visitEnds(first, kFaultBoxesPerTick, [&](const transport::Connector::End& end) {
    const transport::FaultBox* box = end.memory->faultBox(!end.isSend);  // written by the other end
    const uint32_t raised = kernels::loadAcquire(const_cast<uint32_t*>(&box->raised));
    if (from >= 0 || raised == 0) return;
    // A lost connection or a peer that left fails only an operation still waiting on it.
    if (raised != transport::kFaultRaised && (!inFlight || !stuckOn(box->rank))) return;
    from = box->rank;
    kind = raised;
    text.assign(box->text, strnlen(box->text, sizeof box->text));
  });
  faultCursor_ = ends > kFaultBoxesPerTick ? (first + kFaultBoxesPerTick) % ends : 0;
  if (from < 0) return;
  if (kind == transport::kFaultLeft) {
    const std::string call = callName(op, " op #");
    fail(ncclRemoteError, "rank " + std::to_string(rank_) + " stopped in " + call + " because " + text);
    return;
  }
  // The peer's own error code (a mismatch it found, say) stays its own; here it is remote.
  fail(ncclRemoteError, "rank " + std::to_string(rank_) + " stopped because rank " + std::to_string(from) +
                            " failed: " + text);
}

void Watchdog::checkNeighbour(const OpView& op) {
  const kernels::OpSignature mine = op.sig;
  const kernels::OpSignature* from;
  int prev;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    from = fromPrev_;
    prev = prevRank_;
  }
  if (!op.inFlight || from == nullptr) return;
  kernels::OpSignature theirs;
  if (!transport::readAnnouncement(from, &theirs)) return;  // none yet, or being rewritten: next time
  if (mine.seq == 0) {
    // A point-to-point call, stuck on the previous rank, which is in a collective this rank
    // has not called (every rank takes part in it, so it cannot end before this call does)...
    if (theirs.seq != nextCollective_.load(std::memory_order_relaxed) || !stuckOn(prev)) return;
    // ...unless that rank's sends to this one are still on their way (it moved on once they
    // completed locally): the inquiry path asks it, and fails only when it owes nothing.
    if (channel_ != nullptr) {
      neighbourSuspect_ = prev;
      return;
    }
    fail(ncclInvalidUsage, pointToPointMismatch(op, prev, theirs));
    return;
  }
  if (theirs.seq != mine.seq || (theirs.words[0] == mine.words[0] && theirs.words[1] == mine.words[1])) return;
  fail(ncclInvalidUsage, mismatchText(rank_, mine, prev, theirs));
}

std::string Watchdog::pointToPointMismatch(const OpView& op, int peer, const kernels::OpSignature& theirs) const {
  return "rank " + std::to_string(rank_) + " called " + op.name + " (point-to-point) after op #" +
         std::to_string(nextCollective_.load(std::memory_order_relaxed) - 1) + ", waiting on rank " +
         std::to_string(peer) + ", but rank " + std::to_string(peer) + " called " + describeSignature(theirs) +
         " as op #" + std::to_string(theirs.seq) + ": they wait for each other";
}

std::string Watchdog::callName(const OpView& op, const char* number) {
  return op.sig.seq != 0 ? std::string(op.name) + number + std::to_string(op.sig.seq) : std::string(op.name);
}

int Watchdog::waitedPeer() const {
  int peer = connector_.setupWaitingOn();
  for (int c = 0; c < nStatuses_ * kNotedWaits && peer < 0; ++c) {
    const NotedWait wait = notedWait(statuses_[c / kNotedWaits], c % kNotedWaits);
    if (wait.kind != kernels::kWaitNone) peer = wait.peer;
  }
  return peer >= 0 && peer < nRanks_ && peer != rank_ ? peer : -1;
}

void Watchdog::checkWaitedPeers(const OpView& op) {
  if (channel_ == nullptr) return;
  try {
    channel_->serviceInquiries();
  } catch (const std::exception& e) {  // (a flood of unexpected messages: the bootstrap's own waits report it)
    BRAID_WARN("rank %d: reading bootstrap messages for the watchdog: %s", rank_, e.what());
  }
  const auto now = std::chrono::steady_clock::now();
  if (!op.inFlight || now - lastProgressAt_ < kInquireAfter) return;
  // Collectives ask only to name the stopped rank in NCCL_TIMEOUT's report: ranks waiting for a
  // straggler (the usual wait) would otherwise all ask it every few seconds.
  const bool follow = settings_.timeoutSeconds > 0;
  if (!follow && op.sig.seq != 0) return;
  // The previous rank, when checkNeighbour saw it in the next collective: ask it first.
  const int peer = op.sig.seq == 0 && neighbourSuspect_ >= 0 ? neighbourSuspect_ : waitedPeer();
  if (peer < 0) return;
  if (chainToken_ != op.token || chain_.empty() || chain_[0] != peer) {
    chainToken_ = op.token;
    chain_.assign(1, peer);
    headSince_ = now;
    askedAt_ = {};
    headAnswered_ = headIdle_ = false;
  }
  bootstrap::Bootstrap::Answer bytes;
  InquiryAnswer a{};
  if (channel_->takeAnswer(chain_.back(), &bytes)) std::memcpy(&a, bytes.data(), sizeof a);
  if (a.magic == kAnswerMagic && (a.flags & ~kOwesAsker) == 0) {
    headAnswered_ = true;
    headIdle_ = a.inFlight == 0;
    const uint64_t next = nextCollective_.load(std::memory_order_relaxed);
    // (a peer whose sends to this rank are still on their way is asked again later)
    if (chain_.size() == 1 && op.sig.seq == 0 && a.inFlight != 0 && a.sig.seq != 0 && a.sig.seq == next &&
        (a.flags & kOwesAsker) == 0) {
      fail(ncclInvalidUsage, pointToPointMismatch(op, peer, a.sig));
      return;
    }
    const int further = a.waitingOn;
    if (follow && a.inFlight != 0 && further >= 0 && further < nRanks_ && further != rank_ && chain_.size() < 16 &&
        std::find(chain_.begin(), chain_.end(), further) == chain_.end()) {
      chain_.push_back(further);
      headSince_ = now;
      askedAt_ = {};
      headAnswered_ = headIdle_ = false;
    }
  }
  if (now - askedAt_ < kInquireEvery) return;  // (asked again while the wait lasts: its state may change)
  askedAt_ = now;
  (void)channel_->inquire(chain_.back());
}

std::string Watchdog::blamedByInquiry() const {
  if (chain_.empty() || chainToken_ != seenToken_) return "";
  std::string via;
  for (size_t i = 0; i + 1 < chain_.size(); ++i)
    via += (i == 0 ? " (rank " : ", which waits on rank ") + std::to_string(chain_[i]);
  if (!via.empty()) via += ", which waits on it)";
  const std::string head = "rank " + std::to_string(chain_.back());
  if (headAnswered_ && headIdle_) return head + via + " is in no call on this communicator";
  const auto silent = std::chrono::steady_clock::now() - headSince_;
  if (headAnswered_ || silent < kSilentAfter) return "";
  char seconds[32];
  snprintf(seconds, sizeof seconds, "%.1f", std::chrono::duration<double>(silent).count());
  return head + via + " has not answered this rank's watchdog for " + seconds +
         " s: its process is stopped or its host unreachable";
}

void Watchdog::checkPeersAlive(const OpView& op) {
  const auto now = std::chrono::steady_clock::now();
  if (watched_.empty() || now - lastLivenessCheck_ < kLivenessEvery) return;
  lastLivenessCheck_ = now;
  if (!op.inFlight) return;  // a peer that finished and exited is no failure of ours
  const uint64_t seq = op.sig.seq;
  const std::string name = op.name;
  for (const PeerProcess& p : watched_) {
    if (!p.watch.exited() || !stuckOn(p.rank)) continue;
    fail(ncclRemoteError, "rank " + std::to_string(p.rank) + " (process " + std::to_string(p.watch.pid()) +
                              " on this host) has exited; rank " + std::to_string(rank_) + " was in " + name + " op #" +
                              std::to_string(seq));
    return;
  }
}

void Watchdog::checkTimeout(const OpView& op) {
  if (settings_.timeoutSeconds <= 0 || !op.inFlight) return;
  if (std::chrono::steady_clock::now() - lastProgressAt_ < std::chrono::seconds(settings_.timeoutSeconds)) return;
  const std::string text = report();
  emit(text);
  // The rank that stopped progressing, where this host can tell: the one this rank waits on
  // may itself be waiting on it, so every stopped peer process is named, first.
  std::string stopped;
  for (const PeerProcess& p : watched_) {
    if (!p.watch.stopped()) continue;
    stopped += "rank " + std::to_string(p.rank) + " (process " + std::to_string(p.watch.pid()) +
               " on this host) is stopped (SIGSTOP or a debugger) and made no progress; ";
  }
  const std::string who = waitingFor(op);
  // (First: a peer relaying this text may cut its end. An idle peer is said once: who names it.)
  const std::string blamed = headIdle_ && !who.empty() ? "" : blamedByInquiry();
  if (!blamed.empty()) stopped = blamed + "; " + stopped;
  // ncclTimeout, NCCL 2.30's code for a wait that ran out (its device barriers' only use of it).
  fail(ncclTimeout, "no progress for " + std::to_string(settings_.timeoutSeconds) + " s (NCCL_TIMEOUT): " + stopped +
                            (who.empty() ? "" : who + "; ") + text);
}

std::string Watchdog::waitingFor(const OpView& op) const {
  const std::string call = callName(op, " #");
  const int setupPeer = connector_.setupWaitingOn();
  if (setupPeer >= 0) {
    return "rank " + std::to_string(setupPeer) + " has not called " + call + " yet (rank " + std::to_string(rank_) +
           " waits for it to make their connection)";
  }
  const kernels::OpSignature* from;
  int prev;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    from = fromPrev_;
    prev = prevRank_;
  }
  kernels::OpSignature theirs{};
  if (op.sig.seq != 0 && from != nullptr && transport::readAnnouncement(from, &theirs) && theirs.seq < op.sig.seq) {
    return "rank " + std::to_string(prev) + " has not called " + call + " yet (its last collective was #" +
           std::to_string(theirs.seq) + ")";
  }
  return "";
}

void Watchdog::checkLongWait(const OpView& op) {
  if (settings_.warnAfterSeconds <= 0 || !op.inFlight) return;
  const auto still = std::chrono::steady_clock::now() - lastProgressAt_;
  if (still < nextWarnAfter_) return;
  if (settings_.timeoutSeconds > 0 && still >= std::chrono::seconds(settings_.timeoutSeconds)) return;  // (it fails now)
  const long long waited = std::chrono::duration_cast<std::chrono::seconds>(still).count();
  nextWarnAfter_ *= 2;
  const std::string who = waitingFor(op);
  const std::string call = callName(op, " #");
  char head[160];
  snprintf(head, sizeof head, "rank %d of communicator %#llx has waited %lld s in %s without progress", rank_,
           static_cast<unsigned long long>(commHash_), waited, call.c_str());
  emit(std::string(head) + (who.empty() ? "" : ": " + who) + ". Braid keeps waiting, as NCCL does (" +
       (settings_.timeoutSeconds > 0 ? "NCCL_TIMEOUT=" + std::to_string(settings_.timeoutSeconds) + " ends it"
                                     : "set NCCL_TIMEOUT=<seconds> to fail instead") +
       "; next report after " + std::to_string(nextWarnAfter_.count()) + " s). " + report());
}

}  // namespace braid::datapath
