// A collective's signature: what every rank must agree the n-th collective of a communicator
// is. Kernels publish and compare it on the first slot of each connection (see
// kernels/primitives.h); this file encodes it and turns it back into words for messages.
#pragma once

#include <string>

#include "kernels/work.h"
#include "plan/task.h"

namespace braid::datapath {

/// The signature of `task` as the seq-th collective of its communicator (seq from 1).
kernels::OpSignature makeSignature(uint64_t seq, const plan::Task& task);

/// "AllReduce(count=1024, float, sum)", "Broadcast(count=8, int32, root=2)".
std::string describeSignature(const kernels::OpSignature& sig);

/// "rank 3 called AllReduce(count=1024, float, sum) as op #57 but rank 2 called
/// AllGather(count=512, float) as op #57".
std::string mismatchText(int myRank, const kernels::OpSignature& mine, int peer, const kernels::OpSignature& theirs);

/// "rank 0 received step 7 from rank 1 over NET/Socket with 4088 bytes where its kernel expected
/// 4096 ...": a Simple step whose description (kernels::stepInfo, `got`) is not the `wanted`
/// bytes (kernels::checkStepBytes).
std::string stepSizeText(int myRank, int peer, const char* transport, uint64_t step, uint64_t wanted, uint64_t got);

}  // namespace braid::datapath
