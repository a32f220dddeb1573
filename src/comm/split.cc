#include "comm/split.h"

#include <algorithm>

#include "bootstrap/bootstrap.h"

namespace braid::comm {

namespace {

constexpr uint32_t kSplitTag = 0x53504c00;   // tags of split id hand-offs, plus the sequence number
constexpr uint32_t kShrinkTag = 0x53484b00;

/// The first member starts a root and tells the others its id; the others receive it.
ncclUniqueId shareNewId(Communicator& parent, const std::vector<int>& members, uint32_t tag,
                        const InitSettings& settings) {
  ncclUniqueId id;
  bootstrap::Bootstrap& channel = parent.bootstrap();
  if (members.front() == parent.identity().rank) {
    InitSettings local = settings;
    local.commIdEnv.clear();  // NCCL_COMM_ID names the first communicator's root only
    id = makeUniqueId(local);
    for (size_t i = 1; i < members.size(); ++i) channel.send(members[i], tag, &id, sizeof(id));
  } else {
    channel.recv(members.front(), tag, &id, sizeof(id));
  }
  return id;
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
  const ncclUniqueId id = shareNewId(parent, members, kSplitTag + sequence, settings);
  initRank(*child, id, settings);
}

void shrinkRank(Communicator& parent, const std::vector<int>& excluded, uint32_t sequence, Communicator& child,
                const InitSettings& settings) {
  std::vector<int> survivors;
  for (int r = 0; r < parent.identity().nRanks; ++r) {
    if (std::find(excluded.begin(), excluded.end(), r) == excluded.end()) survivors.push_back(r);
  }
  child.setPosition(indexOf(survivors, parent.identity().rank), static_cast<int>(survivors.size()));
  const ncclUniqueId id = shareNewId(parent, survivors, kShrinkTag + sequence, settings);
  initRank(child, id, settings);
}

}  // namespace braid::comm
