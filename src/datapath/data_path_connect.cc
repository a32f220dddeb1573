// The connections of the collectives' algorithms, made on first use: the rings, the trees,
// Hier2D's grid and the peer sets of the algorithms over point-to-point connections (only the
// ranks each exchanges with: algorithm_peers.h). DataPath's members, apart from the running
// of collectives in data_path.cc.
#include "datapath/data_path.h"

#include <algorithm>
#include <vector>

#include "core/log.h"
#include "plan/planner.h"
#include "datapath/algorithm_peers.h"
#include "topology/grid.h"
#include "topology/trees.h"

namespace braid::datapath {

const kernels::RingHandle* DataPath::rings(int n) {
  if (static_cast<int>(rings_.size()) < n) {
    connector_.connectRing(n);
    rings_.clear();
    for (int c = 0; c < n; ++c) rings_.push_back(connector_.ring(c));
  }
  return rings_.data();
}

DataPath::PeerSet DataPath::connectSet(const std::vector<int>& sendTo, const std::vector<int>& recvFrom, int set) {
  connector_.connectPeers(sendTo, recvFrom, set);
  PeerSet conns;
  conns.send.assign(nRanks_, kernels::ConnHandle{});
  conns.recv.assign(nRanks_, kernels::ConnHandle{});
  for (int r : sendTo)
    if (r != rank_) conns.send[r] = connector_.peerSend(r, set);
  for (int r : recvFrom)
    if (r != rank_) conns.recv[r] = connector_.peerRecv(r, set);
  return conns;
}

void DataPath::warnEveryPeer(const char* what, int channels, bool sendRecv) {
  if (everyPeerWarned_ || rank_ != 0 || nRanks_ - 1 <= kEveryPeerWarnPeers) return;
  everyPeerWarned_ = true;  // (once per communicator, by rank 0: every rank makes the same)
  const transport::ConnectorOptions& o = connector_.options();
  const uint64_t newEnds = 2 * static_cast<uint64_t>(nRanks_ - 1) * std::max(1, channels);
  const double mib = static_cast<double>(newEnds * (sendRecv ? o.p2p : o.ring).bytes()) / (1 << 20);
  BRAID_WARN("%s on %d ranks connects every rank to each of the other %d (NCCL_ALGO names it, or leaves nothing "
             "else): %llu connection ends and %.0f MiB of FIFO memory a rank (host memory is backed where "
             "touched), made the first time it runs. The defaults here (RecDoubling, HalvingDoubling, Bruck) connect "
             "at most %d ranks each. (On 2 CPUs, AlltoAll's Direct over 1024 thread ranks took 654 s and 14.5 GB for "
             "its first call.)",
             what, nRanks_, nRanks_ - 1, static_cast<unsigned long long>(newEnds), mib,
             plan::tunerFor(nRanks_, settings_.limits).peersPerChannel(kernels::Algo::kBruck));
}

void DataPath::preparePeers(kernels::Algo algo, int n, kernels::CollWork* works) {
  int& ready = peersReady_[static_cast<size_t>(algo)];
  if (ready < n) {  // (the peers only when a channel is new for the algorithm: this runs per call)
    const std::vector<int> peers = algorithmPeers(algo, nRanks_, rank_);
    while (static_cast<int>(peerSets_.size()) < n) {
      peerSets_.push_back(PeerSet{std::vector<kernels::ConnHandle>(nRanks_), std::vector<kernels::ConnHandle>(nRanks_)});
    }
    for (int c = ready; c < n; ++c) {
      // (every rank prepares the same algorithm's channel at once: every peer in one exchange)
      if (connectsEveryPeer(algo)) {
        warnEveryPeer(topo::algoName(algo), n, false);
        connector_.connectEveryPeer(transport::peerSet(c));
      }
      const PeerSet added = connectSet(peers, peers, transport::peerSet(c));
      for (int r : peers) {
        peerSets_[c].send[r] = added.send[r];
        peerSets_[c].recv[r] = added.recv[r];
      }
    }
    ready = n;
  }
  for (int c = 0; c < n; ++c) {
    works[c].peerSend = peerSets_[c].send.data();
    works[c].peerRecv = peerSets_[c].recv.data();
  }
}

void DataPath::prefaultSlots(const plan::CollPlan& plan, const kernels::RingHandle* ring, uint64_t bytes) {
  for (int c = 0; c < plan.nChannels; ++c) {
    const kernels::CollWork& w = plan.works[c];
    if (w.algo == kernels::Algo::kRing) {
      prefault_.cover(ring[c].send, plan.proto, bytes);
      prefault_.cover(ring[c].recv, plan.proto, bytes);
      continue;
    }
    // Only where each end a rank holds carries this call's messages: a tree's edges and the
    // recursive exchanges use both directions of every partner. Binomial's and Bruck's sets
    // (and Hier2D's) hold ends a given rank never uses, whose pages would be memory the steady
    // state does not take: their slots fault on use, as before.
    const kernels::Algo a = w.algo;
    if (a != kernels::Algo::kTree && a != kernels::Algo::kRecDoubling && a != kernels::Algo::kHalvingDoubling &&
        a != kernels::Algo::kDirect && a != kernels::Algo::kPairwise) {
      continue;
    }
    // (A channel's peer set is shared by the algorithms over it: this one's partners only.)
    std::vector<int> partners;
    if (a == kernels::Algo::kTree) {  // (the tree's own set: its neighbours alone are connected)
      for (int r = 0; r < nRanks_; ++r) partners.push_back(r);
    } else {
      partners = algorithmPeers(a, nRanks_, rank_);
    }
    for (int r : partners) {  // (an end the algorithm does not use has no slots)
      if (w.peerSend != nullptr) prefault_.cover(w.peerSend[r], plan.proto, bytes);
      if (w.peerRecv != nullptr) prefault_.cover(w.peerRecv[r], plan.proto, bytes);
    }
  }
}

void DataPath::prepareTrees(int n, kernels::CollWork* works) {
  for (int c = static_cast<int>(trees_.size()); c < n; ++c) {
    const topo::TreeLinks t = topo::rankTree(nodeOf_, rank_, c % 2);
    TreeChannel channel;
    channel.links.parent = t.parent;
    channel.links.nChildren = t.nChildren;
    std::vector<int> neighbours;
    if (t.parent >= 0) neighbours.push_back(t.parent);
    for (int i = 0; i < topo::kTreeMaxChildren; ++i) {
      channel.links.children[i] = t.children[i];
      if (i < t.nChildren) neighbours.push_back(t.children[i]);
    }
    // Every edge is used both ways (up, then down): both ends connect both directions.
    channel.conns = connectSet(neighbours, neighbours, transport::treeSet(c));
    trees_.push_back(std::move(channel));
  }
  for (int c = 0; c < n; ++c) {
    works[c].tree = trees_[c].links;
    works[c].peerSend = trees_[c].conns.send.data();
    works[c].peerRecv = trees_[c].conns.recv.data();
  }
}

void DataPath::prepareGrid(int n, kernels::CollWork* works) {
  if (gridSets_.empty()) {
    const topo::GridLinks g = topo::rankGrid(nodeOf_, rank_);
    grid_ = kernels::GridHandle{g.rowNext, g.rowPrev, g.rowSize, g.rowIndex, g.colNext, g.colPrev, g.colSize, g.colIndex};
  }
  const kernels::GridHandle& g = grid_;
  for (int c = static_cast<int>(gridSets_.size()); c < n; ++c)
    gridSets_.push_back(connectSet({g.rowNext, g.colNext}, {g.rowPrev, g.colPrev}, transport::gridSet(c)));
  for (int c = 0; c < n; ++c) {
    works[c].grid = grid_;
    works[c].peerSend = gridSets_[c].send.data();
    works[c].peerRecv = gridSets_[c].recv.data();
  }
}

}  // namespace braid::datapath
