/*
 * Drives a loopback net plugin (net_loopback.c) directly, without Braid, to check what Braid's
 * own traffic never asks of it (Braid posts one receive per irecv):
 *   net_multirecv PLUGIN.so MAXRECVS
 * checks that the plugin reports maxRecvs MAXRECVS; when MAXRECVS > 1, that one irecv of 3
 * receives (tags 7, 8, 9) takes three isends posted in another order (tags 9, 7, 8; one of
 * 0 bytes, one shorter than its receive), completes once all three landed, and that test
 * reports each receive's size; then that an irecv of MAXRECVS + 1 receives is refused.
 * Prints "multirecv: ok" and exits 0, or says what went wrong and exits 1.
 */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl_net.h"

static void logNothing(ncclDebugLogLevel level, unsigned long flags, const char* file, int line, const char* fmt, ...) {
  (void)level, (void)flags, (void)file, (void)line, (void)fmt;
}

static int fail(const char* what) {
  printf("multirecv: %s\n", what);
  return 1;
}

#define CHECK(cond, what) \
  do { if (!(cond)) return fail(what); } while (0)

/* Tests the send requests and the receive request until all are done (bounded). */
static int complete(const ncclNet_v11_t* net, void** sends, int nSends, void* recv, int* sizes) {
  int recvDone = 0, sendsDone = 0;
  for (long spin = 0; spin < 10000000 && (!recvDone || sendsDone < nSends); ++spin) {
    for (int i = 0; i < nSends; ++i) {
      int done = 0, size = -1;
      if (sends[i] == NULL) continue;
      if (net->test(sends[i], &done, &size) != ncclSuccess) return fail("test of a send failed");
      if (done) sends[i] = NULL, ++sendsDone;
    }
    if (!recvDone && net->test(recv, &recvDone, sizes) != ncclSuccess) return fail("test of the irecv failed");
  }
  return recvDone && sendsDone == nSends ? 0 : fail("the requests did not complete");
}

int main(int argc, char** argv) {
  if (argc != 3) return fail("usage: net_multirecv PLUGIN.so MAXRECVS");
  const int maxRecvs = atoi(argv[2]);
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  CHECK(lib != NULL, "cannot open the plugin");
  const ncclNet_v11_t* net = (const ncclNet_v11_t*)dlsym(lib, "ncclNetPlugin_v11");
  CHECK(net != NULL, "the plugin exports no ncclNetPlugin_v11");
  void* ctx = NULL;
  ncclNetCommConfig_v11_t config = {0};
  CHECK(net->init(&ctx, 1, &config, logNothing, NULL) == ncclSuccess, "init failed");
  ncclNetProperties_v11_t props;
  CHECK(net->getProperties(0, &props) == ncclSuccess, "getProperties failed");
  if (props.maxRecvs != maxRecvs) {
    printf("multirecv: maxRecvs is %d, not %d\n", props.maxRecvs, maxRecvs);
    return 1;
  }

  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void *listenComm = NULL, *sendComm = NULL, *recvComm = NULL;
  CHECK(net->listen(ctx, 0, handle, &listenComm) == ncclSuccess, "listen failed");
  CHECK(net->connect(ctx, 0, handle, &sendComm, NULL) == ncclSuccess && sendComm != NULL, "connect failed");
  for (int i = 0; i < 1000000 && recvComm == NULL; ++i)
    CHECK(net->accept(listenComm, &recvComm, NULL) == ncclSuccess, "accept failed");
  CHECK(recvComm != NULL, "accept never returned a comm");

  enum { kBytes = 3 * 8192 };
  char* src = malloc(kBytes);
  char* dst = malloc(kBytes);
  for (int i = 0; i < kBytes; ++i) src[i] = (char)(i * 7 + 1), dst[i] = 0;
  void *srcMr = NULL, *dstMr = NULL;
  CHECK(net->regMr(sendComm, src, kBytes, NCCL_PTR_HOST, &srcMr) == ncclSuccess, "regMr of the sender failed");
  CHECK(net->regMr(recvComm, dst, kBytes, NCCL_PTR_HOST, &dstMr) == ncclSuccess, "regMr of the receiver failed");

  void* recv = NULL;
  int tags[NCCL_NET_MAX_REQUESTS];
  size_t sizes[NCCL_NET_MAX_REQUESTS];
  void* datas[NCCL_NET_MAX_REQUESTS];
  void* mhs[NCCL_NET_MAX_REQUESTS];
  void* phs[NCCL_NET_MAX_REQUESTS] = {NULL};
  if (maxRecvs > 1) {
    /* receive i: tag 7 + i, 8192 bytes at dst + 8192 i; the sends: tag 9 (5000 bytes from
     * src), tag 7 (8192 from src + 8192), tag 8 (0 bytes) */
    for (int i = 0; i < 3; ++i) tags[i] = 7 + i, sizes[i] = 8192, datas[i] = dst + 8192 * i, mhs[i] = dstMr;
    CHECK(net->irecv(recvComm, 3, datas, sizes, tags, mhs, phs, &recv) == ncclSuccess && recv != NULL,
          "an irecv of 3 receives was refused");
    void* sends[3] = {NULL};
    CHECK(net->isend(sendComm, src, 5000, 9, srcMr, NULL, &sends[0]) == ncclSuccess, "isend failed");
    CHECK(net->isend(sendComm, src + 8192, 8192, 7, srcMr, NULL, &sends[1]) == ncclSuccess, "isend failed");
    CHECK(net->isend(sendComm, src, 0, 8, srcMr, NULL, &sends[2]) == ncclSuccess, "isend failed");
    int got[NCCL_NET_MAX_REQUESTS] = {-1, -1, -1};
    if (complete(net, sends, 3, recv, got) != 0) return 1;
    if (got[0] != 8192 || got[1] != 0 || got[2] != 5000) {
      printf("multirecv: test reported sizes %d %d %d, not 8192 0 5000\n", got[0], got[1], got[2]);
      return 1;
    }
    CHECK(memcmp(dst, src + 8192, 8192) == 0, "the tag-7 receive holds the wrong bytes");
    CHECK(memcmp(dst + 2 * 8192, src, 5000) == 0, "the tag-9 receive holds the wrong bytes");
    for (int i = 8192; i < 2 * 8192; ++i) CHECK(dst[i] == 0, "the 0-byte receive was written");
  }
  /* one receive more than maxRecvs: refused, and the comm still works for one */
  for (int i = 0; i <= maxRecvs; ++i) tags[i] = 1, sizes[i] = 16, datas[i] = dst, mhs[i] = dstMr;
  recv = NULL;
  CHECK(net->irecv(recvComm, maxRecvs + 1, datas, sizes, tags, mhs, phs, &recv) != ncclSuccess,
        "an irecv of more receives than maxRecvs was taken");
  void* send[1] = {NULL};
  CHECK(net->irecv(recvComm, 1, datas, sizes, tags, mhs, phs, &recv) == ncclSuccess, "an irecv of 1 was refused");
  CHECK(net->isend(sendComm, src, 16, 1, srcMr, NULL, &send[0]) == ncclSuccess, "isend failed");
  int got1 = -1;
  if (complete(net, send, 1, recv, &got1) != 0) return 1;
  CHECK(got1 == 16 && memcmp(dst, src, 16) == 0, "the single receive went wrong");

  net->deregMr(sendComm, srcMr);
  net->deregMr(recvComm, dstMr);
  net->closeSend(sendComm);
  net->closeRecv(recvComm);
  net->closeListen(listenComm);
  net->finalize(ctx);
  free(src);
  free(dst);
  printf("multirecv: ok\n");
  return 0;
}
