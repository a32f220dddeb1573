/* A second NCCL for the tests: it exports ncclGetVersion alone, answering NVIDIA's 2.28.9 code,
   as NVIDIA's libnccl.so.2 would when a program loads it beside Braid's. */
int ncclGetVersion(int* version) {
  *version = 22809;
  return 0;
}
