// put_perf: ncclPutSignal and ncclWaitSignal around a ring, with nccl-tests' flags and table
// (see perf.h): sendrecv_perf's traffic, one-sided.
#include "perf/perf.h"

int main(int argc, char** argv) {
  return braid::perf::run(braid::perf::Coll::kPut, argc, argv);
}
