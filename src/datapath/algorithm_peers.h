// Which ranks an algorithm over point-to-point connections exchanges with, so that a
// communicator connects those and no others: log2 n partners for the recursive algorithms, not
// a connection (and its FIFO memory) to every rank. On 64 thread ranks, connecting every rank
// for an 8-byte RecDoubling AllReduce took 6.9 GB; the partners alone, a tenth of it.
#pragma once

#include <vector>

#include "kernels/work.h"

namespace braid::datapath {

/// The ranks `rank` of `nRanks` sends to and receives from in algorithm `algo`, in ascending
/// order, without `rank` itself. The relation is symmetric (each is in the other's list), so
/// both ends of every connection ask for it:
/// - RecDoubling, HalvingDoubling: the partners of the schedule over p = 2^k virtual ranks
///   (kernels/algorithms/halving_doubling.h: virtual rank v stands for rank 2v+1 below the
///   folded pairs, v + folded above), and the folding neighbour (me+1 for an even rank of the
///   first 2 x (n-p), me-1 for an odd one);
/// - Binomial, Bruck: me +- 2^k (mod n) (binomial trees of any root, Bruck's rounds);
/// - Direct, Pairwise and anything else: every other rank.
std::vector<int> algorithmPeers(kernels::Algo algo, int nRanks, int rank);

/// True where algorithmPeers is every other rank on every rank, whatever nRanks (Direct and
/// Pairwise): all ranks can then connect in one collective exchange (Connector::connectEveryPeer).
/// Not where it happens to be on some ranks (RecDoubling's on 3 ranks: rank 1 has both others,
/// rank 0 one).
bool connectsEveryPeer(kernels::Algo algo);

/// The most distinct partners the log-n algorithms (RecDoubling, HalvingDoubling, Binomial,
/// Bruck) give one rank together on nRanks ranks: 3 ceil(log2 n) (me +- 2^k, me xor 2^k).
int logPeersBound(int nRanks);

}  // namespace braid::datapath
