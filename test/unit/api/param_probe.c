/* A C program on Braid's libnccl.so.2 that prints what the parameter API reports, so that
 * param_api_test.cc can set the environment (NCCL_PARAM_DUMP_ALL, values) per run:
 *   param_probe keys          every key, one a line
 *   param_probe get KEY       ncclParamGetParameter's answer
 *   param_probe i64 KEY       ncclParamBind + ncclParamGetI64
 *   param_probe typed KEY     the eight typed reads' result codes
 *   param_probe signal CTX    ncclSignal's answer for context CTX on one rank
 *   param_probe dump          ncclParamDumpAll */
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char** argv) {
  if (argc >= 2 && strcmp(argv[1], "keys") == 0) {
    const char** keys = NULL;
    int n = 0;
    ncclResult_t r = ncclParamGetAllParameterKeys(&keys, &n);
    for (int i = 0; i < n; ++i) printf("%s\n", keys[i]);
    return r == ncclSuccess ? 0 : 1;
  }
  if (argc >= 3 && strcmp(argv[1], "get") == 0) {
    const char* value = NULL;
    int len = -1;
    ncclResult_t r = ncclParamGetParameter(argv[2], &value, &len);
    printf("result %d value '%s' len %d\n", (int)r, value != NULL ? value : "(null)", len);
    return 0;
  }
  if (argc >= 3 && strcmp(argv[1], "i64") == 0) {
    ncclParamHandle_t h = NULL;
    int64_t v = 0;
    ncclResult_t r = ncclParamBind(&h, argv[2]);
    if (r == ncclSuccess) r = ncclParamGetI64(h, &v);
    printf("result %d value %lld: %s\n", (int)r, (long long)v, ncclGetLastError(NULL));
    return 0;
  }
  if (argc >= 3 && strcmp(argv[1], "typed") == 0) {
    ncclParamHandle_t h = NULL;
    if (ncclParamBind(&h, argv[2]) != ncclSuccess) return 1;
    int8_t i8; int16_t i16; int32_t i32; int64_t i64; uint8_t u8; uint16_t u16; uint32_t u32; uint64_t u64;
    printf("I8 %d I16 %d I32 %d I64 %d U8 %d U16 %d U32 %d U64 %d\n", (int)ncclParamGetI8(h, &i8),
           (int)ncclParamGetI16(h, &i16), (int)ncclParamGetI32(h, &i32), (int)ncclParamGetI64(h, &i64),
           (int)ncclParamGetU8(h, &u8), (int)ncclParamGetU16(h, &u16), (int)ncclParamGetU32(h, &u32),
           (int)ncclParamGetU64(h, &u64));
    return 0;
  }
  if (argc >= 3 && strcmp(argv[1], "signal") == 0) {
    /* What ncclSignal says about context argv[2] on a 1-rank communicator (NCCL_NUM_RMA_CTX). */
    ncclComm_t comm = NULL;
    if (ncclCommInitAll(&comm, 1, NULL) != ncclSuccess) return 1;
    ncclResult_t r = ncclSignal(0, 0, atoi(argv[2]), 0, comm, NULL);
    printf("result %d: %s\n", (int)r, ncclGetLastError(NULL));
    ncclCommDestroy(comm);
    return 0;
  }
  if (argc >= 2 && strcmp(argv[1], "dump") == 0) {
    ncclParamDumpAll();
    return 0;
  }
  fprintf(stderr, "usage: param_probe keys | get KEY | i64 KEY | dump\n");
  return 2;
}
