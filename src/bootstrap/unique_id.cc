#include "bootstrap/unique_id.h"

#include <cstring>
#include <type_traits>

#include "core/status.h"

namespace braid::bootstrap {

namespace {

constexpr uint32_t kMagic = 0x44495242;  // "BRID"

struct Layout {
  uint32_t magic;
  uint32_t abiVersion;
  uint64_t secret;
  net::SocketAddress::Packed root;
  uint32_t flags;
  int32_t grownFrom;
};
static_assert(std::is_trivially_copyable_v<Layout> && sizeof(Layout) <= NCCL_UNIQUE_ID_BYTES);

constexpr uint32_t kFlagRootStartedByRank0 = 1;

}  // namespace

ncclUniqueId UniqueId::encode() const {
  Layout l{};
  l.magic = kMagic;
  l.abiVersion = NCCL_VERSION_CODE;
  l.secret = secret;
  l.root = root.pack();
  l.flags = rootStartedByRank0 ? kFlagRootStartedByRank0 : 0;
  l.grownFrom = grownFrom;
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  std::memcpy(id.internal, &l, sizeof(l));
  return id;
}

UniqueId UniqueId::decode(const ncclUniqueId& id) {
  Layout l;
  std::memcpy(&l, id.internal, sizeof(l));
  if (l.magic != kMagic) {
    fail(ncclInvalidArgument, "the unique id was not made by Braid's ncclGetUniqueId (uninitialised, or from "
                              "another NCCL library?)");
  }
  UniqueId u;
  u.secret = l.secret;
  u.root = net::SocketAddress::unpack(l.root);
  u.rootStartedByRank0 = (l.flags & kFlagRootStartedByRank0) != 0;
  u.grownFrom = l.grownFrom;
  if (!u.root.valid()) fail(ncclInvalidArgument, "the unique id holds no valid root address (corrupt id?)");
  return u;
}

uint64_t secretForAddress(const std::string& commId) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (unsigned char c : "braid:" + commId) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

namespace {
/// A 64-bit finaliser (the one of splitmix64): every input bit changes about half the output.
uint64_t mix(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
}  // namespace

uint64_t keyedSecret(uint64_t idSecret, const std::string& passphrase) {
  if (passphrase.empty()) return idSecret;
  uint64_t h = mix(idSecret ^ 0x627261696400ull);  // "braid"
  for (unsigned char c : passphrase) h = mix(h ^ c);
  h = mix(h ^ passphrase.size());
  return h == 0 ? 1 : h;
}

}  // namespace braid::bootstrap
