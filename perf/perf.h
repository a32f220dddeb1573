// The *_perf benchmark tools: nccl-tests' flags and output table, with the ranks launched
// locally by the tool itself (--ranks N, processes by default, --threads for threads), so no
// MPI is needed. They use only the public NCCL API of the library they are linked with.
// put_perf (kPut): each rank puts and signals to the next rank of a ring and waits for the
// previous one's signal (ncclPutSignal, ncclWaitSignal on a window): sendrecv_perf's traffic.
#pragma once

namespace braid::perf {

enum class Coll { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kReduce, kAlltoAll, kSendRecv, kPut };

/// The whole tool: parses argv, launches the ranks, prints the table. Returns the exit status.
int run(Coll coll, int argc, char** argv);

}  // namespace braid::perf
