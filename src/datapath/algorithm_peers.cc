#include "datapath/algorithm_peers.h"

#include <algorithm>

namespace braid::datapath {

namespace {

std::vector<int> foldedPartners(int n, int me) {
  int p = 1;
  while (p * 2 <= n) p *= 2;
  const int folded = n - p;
  std::vector<int> out;
  if (me < 2 * folded) out.push_back(me % 2 == 0 ? me + 1 : me - 1);
  if (me < 2 * folded && me % 2 == 0) return out;  // sits out: its odd neighbour only
  const int virt = me < 2 * folded ? me / 2 : me - folded;
  for (int bit = 1; bit < p; bit *= 2) {
    const int other = virt ^ bit;
    out.push_back(other < folded ? 2 * other + 1 : other + folded);
  }
  return out;
}

std::vector<int> powerOfTwoDistances(int n, int me) {
  std::vector<int> out;
  for (int d = 1; d < n; d *= 2) {
    out.push_back((me + d) % n);
    out.push_back((me - d % n + n) % n);
  }
  return out;
}

}  // namespace

std::vector<int> algorithmPeers(kernels::Algo algo, int nRanks, int rank) {
  std::vector<int> out;
  switch (algo) {
    case kernels::Algo::kRecDoubling:
    case kernels::Algo::kHalvingDoubling:
      out = foldedPartners(nRanks, rank);
      break;
    case kernels::Algo::kBinomial:
    case kernels::Algo::kBruck:
      out = powerOfTwoDistances(nRanks, rank);
      break;
    default:
      for (int r = 0; r < nRanks; ++r) out.push_back(r);
      break;
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  out.erase(std::remove(out.begin(), out.end(), rank), out.end());
  return out;
}

int logPeersBound(int nRanks) {
  int log2n = 0;
  while ((1 << log2n) < nRanks) ++log2n;
  return 3 * log2n;
}

bool connectsEveryPeer(kernels::Algo algo) {
  return algo == kernels::Algo::kDirect || algo == kernels::Algo::kPairwise;
}

}  // namespace braid::datapath
