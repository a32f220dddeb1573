#include "comm/split.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "bootstrap/bootstrap.h"
#include "bootstrap/root.h"

namespace braid::comm {

namespace {

constexpr uint32_t kSplitTag = 0x53504c00;   // tags of split id hand-offs, plus the sequence number
constexpr uint32_t kShrinkTag = 0x53484b00;

/// What the first member tells each other member: the new communicator's id, and which
/// parent ranks it counts as members (their number, a hash of the list, and its first ranks
/// for the message), so members that disagree fail at once, naming both views.
struct Handoff {
  ncclUniqueId id;
  int32_t nMembers;
  int32_t nListed;  // members[0..nListed) below
  uint64_t hash;
  int32_t members[16];
};

uint64_t hashOf(const std::vector<int>& members) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the ranks
  for (int r : members) {
    for (int b = 0; b < 4; ++b) h = (h ^ ((static_cast<uint32_t>(r) >> (8 * b)) & 0xff)) * 1099511628211ull;
  }
  return h;
}

std::string listOf(const int32_t* ranks, int listed, int total) {
  std::string out;
  for (int i = 0; i < listed; ++i) out += (i ? "," : "") + std::to_string(ranks[i]);
  if (total > listed) out += ",...";
  return "{" + out + "}";
}

/// The root the first member started for a new communicator: stopped when the member's init
/// ends, so an init that failed (a member that never came) leaves no thread or socket behind.
class RootOfNew {
 public:
  RootOfNew() = default;
  ~RootOfNew() {
    if (ticket_ != 0) bootstrap::stopRoot(ticket_);
  }
  RootOfNew(const RootOfNew&) = delete;
  RootOfNew& operator=(const RootOfNew&) = delete;
  uint64_t* ticket() { return &ticket_; }

 private:
  uint64_t ticket_ = 0;
};

std::string disagreement(const Handoff& first, int firstRank, const Handoff& other, int otherRank) {
  const int listed = std::max(0, std::min<int>(first.nListed, 16));
  const int otherListed = std::max(0, std::min<int>(other.nListed, 16));
  return "the ranks disagree on the members of the new communicator: rank " + std::to_string(firstRank) +
         " (the first member) counts " + std::to_string(first.nMembers) + " parent ranks " +
         listOf(first.members, listed, first.nMembers) + ", rank " + std::to_string(otherRank) + " counts " +
         std::to_string(other.nMembers) + " " + listOf(other.members, otherListed, other.nMembers) +
         "; every rank must pass the same exclusion list";
}

/// The first member's word after the members' answers (shrink): go, or the reason not to.
struct Go {
  int32_t go;
  char reason[500];
};

/// The first member starts a root and tells the others its id; the others receive it and check
/// that they count the same members. With `confirm` (shrink, whose ranks each name the excluded
/// ones), each member also answers with its own view and the first member tells every member
/// to go on or why not, so that one that disagrees fails them all at once instead of leaving
/// the others to wait for it at the root. abortFlag: watched instead of the parent's (null:
/// the parent's).
ncclUniqueId shareNewId(Communicator& parent, const std::vector<int>& members, uint32_t tag, bool confirm,
                        const InitSettings& settings, RootOfNew* root, const std::atomic<bool>* abortFlag) {
  bootstrap::Bootstrap& channel = parent.bootstrap();
  const int me = parent.identity().rank;
  Handoff mine{};
  mine.nMembers = static_cast<int32_t>(members.size());
  mine.nListed = static_cast<int32_t>(std::min<size_t>(members.size(), 16));
  mine.hash = hashOf(members);
  for (int i = 0; i < mine.nListed; ++i) mine.members[i] = members[i];
  const uint32_t answerTag = tag | (1u << 20), goTag = tag | (1u << 21);  // (sequences stay below 2^20)
  if (members.front() == me) {
    InitSettings local = settings;
    local.commIdEnv.clear();  // NCCL_COMM_ID names the first communicator's root only
    mine.id = makeUniqueId(local, root->ticket());
    for (size_t i = 1; i < members.size(); ++i) channel.send(members[i], tag, &mine, sizeof(mine), abortFlag);
    if (!confirm) return mine.id;
    Go word{};
    word.go = 1;
    for (size_t i = 1; i < members.size(); ++i) {
      Handoff theirs{};
      channel.recv(members[i], answerTag, &theirs, sizeof(theirs), abortFlag);
      if (word.go && (theirs.nMembers != mine.nMembers || theirs.hash != mine.hash)) {
        word.go = 0;
        snprintf(word.reason, sizeof word.reason, "%s", disagreement(mine, me, theirs, members[i]).c_str());
      }
    }
    for (size_t i = 1; i < members.size(); ++i) channel.send(members[i], goTag, &word, sizeof(word), abortFlag);
    if (!word.go) fail(ncclInvalidUsage, "%s", word.reason);
    return mine.id;
  }
  Handoff theirs{};
  channel.recv(members.front(), tag, &theirs, sizeof(theirs), abortFlag);
  const bool agree = theirs.nMembers == mine.nMembers && theirs.hash == mine.hash;
  if (!confirm && !agree) fail(ncclInvalidUsage, "%s", disagreement(theirs, members.front(), mine, me).c_str());
  if (!confirm) return theirs.id;
  channel.send(members.front(), answerTag, &mine, sizeof(mine), abortFlag);
  Go word{};
  channel.recv(members.front(), goTag, &word, sizeof(word), abortFlag);
  word.reason[sizeof word.reason - 1] = '\0';
  if (!agree) fail(ncclInvalidUsage, "%s", disagreement(theirs, members.front(), mine, me).c_str());
  if (!word.go) fail(ncclInvalidUsage, "%s", word.reason);
  return theirs.id;
}

int indexOf(const std::vector<int>& v, int x) {
  return static_cast<int>(std::find(v.begin(), v.end(), x) - v.begin());
}

}  // namespace

std::vector<int> splitMembers(const std::vector<int>& colors, const std::vector<int>& keys, int color) {
  std::vector<int> members;
  for (int r = 0; r < static_cast<int>(colors.size()); ++r) {
    if (colors[r] == color) members.push_back(r);
  }
  std::stable_sort(members.begin(), members.end(), [&](int a, int b) { return keys[a] < keys[b]; });
  return members;
}

void splitRank(Communicator& parent, int color, int key, uint32_t sequence, Communicator* child,
               const InitSettings& settings) {
  const int n = parent.identity().nRanks;
  std::vector<int32_t> pairs(2 * n);
  const int me = parent.identity().rank;
  pairs[2 * me] = color;
  pairs[2 * me + 1] = key;
  parent.bootstrap().allGather(pairs.data(), 2 * sizeof(int32_t));
  if (child == nullptr) return;

  std::vector<int> colors(n), keys(n);
  for (int r = 0; r < n; ++r) {
    colors[r] = pairs[2 * r];
    keys[r] = pairs[2 * r + 1];
  }
  const std::vector<int> members = splitMembers(colors, keys, color);
  child->setPosition(indexOf(members, me), static_cast<int>(members.size()));
  RootOfNew root;
  const ncclUniqueId id = shareNewId(parent, members, kSplitTag + sequence, /*confirm=*/false, settings, &root, nullptr);
  initRank(*child, id, settings);
}

void shrinkRank(Communicator& parent, const std::vector<int>& excluded, uint32_t sequence, Communicator& child,
                const InitSettings& settings) {
  std::vector<int> survivors;
  for (int r = 0; r < parent.identity().nRanks; ++r) {
    if (std::find(excluded.begin(), excluded.end(), r) == excluded.end()) survivors.push_back(r);
  }
  child.setPosition(indexOf(survivors, parent.identity().rank), static_cast<int>(survivors.size()));
  // The parent may have failed (a rank died): its abort flag is raised, so the hand-off
  // watches the child's, which ncclCommAbort on the new communicator raises.
  RootOfNew root;
  const ncclUniqueId id = shareNewId(parent, survivors, kShrinkTag + sequence, /*confirm=*/true, settings, &root,
                                     &child.abortFlag());
  initRank(child, id, settings);
}

}  // namespace braid::comm
