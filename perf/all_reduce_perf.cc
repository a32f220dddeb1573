// all_reduce_perf: AllReduce with nccl-tests' flags and table (see perf.h).
#include "perf/perf.h"

int main(int argc, char** argv) { return braid::perf::run(braid::perf::Coll::kAllReduce, argc, argv); }
