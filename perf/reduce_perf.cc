// reduce_perf: Reduce with nccl-tests' flags and table (see perf.h).
#include "perf/perf.h"

int main(int argc, char** argv) { return braid::perf::run(braid::perf::Coll::kReduce, argc, argv); }
