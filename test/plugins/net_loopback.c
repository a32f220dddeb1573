/*
 * A net plugin for Braid's tests, written against include/nccl_net.h: TCP between processes
 * of one machine (127.0.0.1, or NET_LOOPBACK_ADDR), host memory only, 2 devices (both the same
 * loopback), maxRecvs 1. Exports ncclNetPlugin_v11 (and, to be seen and left alone, a
 * ncclCollNetPlugin_v9 whose functions are NULL), or with -DNET_V6_ONLY only ncclNetPlugin_v6.
 *
 * Every message is an 8-byte length, then its bytes; requests on a comm move in the order they
 * were posted, progressed by test. The plugin checks what Braid does: more than
 * NCCL_NET_MAX_REQUESTS_V6 (8) requests on a comm, a memory handle that is not the comm's, or
 * data outside the registered range fail the call (and say so in the log).
 *
 * Variants for the bad-plugin tests: -DNET_FAIL_ISEND (the 3rd isend of the process fails with
 * ncclSystemError), -DNET_INIT_FAILS, -DNET_NO_DEVICES (devices() reports 0), -DNET_NO_SYMBOL
 * (exports no ncclNetPlugin_v* symbol).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "nccl_net.h"

/* The layouts NVIDIA's nccl_net.h gives (LP64): a plugin built against it sees the same. */
#define LAYOUT(name, cond) typedef char name[(cond) ? 1 : -1]
LAYOUT(handleMax, NCCL_NET_HANDLE_MAXSIZE == 128 && NCCL_NET_MAX_REQUESTS == 32 && NCCL_NET_MAX_REQUESTS_V6 == 8);
LAYOUT(ptrBits, NCCL_PTR_HOST == 1 && NCCL_PTR_CUDA == 2 && NCCL_PTR_DMABUF == 4 && NCCL_NET_MAX_DEVS_PER_NIC == 4);
LAYOUT(props11, sizeof(ncclNetProperties_v11_t) == 112 && offsetof(ncclNetProperties_v11_t, latency) == 44 &&
                    offsetof(ncclNetProperties_v11_t, netDeviceType) == 56 &&
                    offsetof(ncclNetProperties_v11_t, vProps) == 64 &&
                    offsetof(ncclNetProperties_v11_t, maxP2pBytes) == 88 &&
                    offsetof(ncclNetProperties_v11_t, maxMultiRequestSize) == 104);
LAYOUT(props10, sizeof(ncclNetProperties_v10_t) == 104 && sizeof(ncclNetProperties_v9_t) == 104 &&
                    offsetof(ncclNetProperties_v9_t, maxCollBytes) == 96);
LAYOUT(props8, sizeof(ncclNetProperties_v8_t) == 64 && offsetof(ncclNetProperties_v8_t, speed) == 32 &&
                   offsetof(ncclNetProperties_v8_t, netDeviceVersion) == 56);
LAYOUT(props7, sizeof(ncclNetProperties_v7_t) == 56 && offsetof(ncclNetProperties_v7_t, maxRecvs) == 44);
LAYOUT(props6, sizeof(ncclNetProperties_v6_t) == 48 && offsetof(ncclNetProperties_v6_t, latency) == 36 &&
                   offsetof(ncclNetProperties_v6_t, maxRecvs) == 44);
LAYOUT(net11, sizeof(ncclNet_v11_t) == 22 * sizeof(void*) && offsetof(ncclNet_v11_t, test) == 13 * sizeof(void*) &&
                  offsetof(ncclNet_v11_t, finalize) == 20 * sizeof(void*));
LAYOUT(net10, sizeof(ncclNet_v10_t) == 20 * sizeof(void*) && sizeof(ncclNet_v9_t) == 20 * sizeof(void*));
LAYOUT(net8, sizeof(ncclNet_v8_t) == 19 * sizeof(void*) && sizeof(ncclNet_v7_t) == 19 * sizeof(void*));
LAYOUT(net6, sizeof(ncclNet_v6_t) == 17 * sizeof(void*) && offsetof(ncclNet_v6_t, isend) == 10 * sizeof(void*) &&
                 offsetof(ncclNet_v6_t, closeListen) == 16 * sizeof(void*));
LAYOUT(coll11, sizeof(ncclCollNet_v11_t) == 19 * sizeof(void*) && sizeof(ncclCollNet_v9_t) == 18 * sizeof(void*) &&
                   sizeof(ncclCollNet_v8_t) == 17 * sizeof(void*) && sizeof(ncclCollNet_v6_t) == 15 * sizeof(void*));
LAYOUT(smallStructs, sizeof(ncclNetDeviceHandle_v7_t) == 32 && sizeof(ncclNetCommConfig_v11_t) == 4 &&
                         sizeof(ncclNetAttr_v11_t) == 44 && sizeof(ncclNetSGE_v8_t) == 24 &&
                         sizeof(ncclNetSGE_v11_t) == 24 && sizeof(ncclNetVDeviceProps_v11_t) == 20);

#define MAX_REQUESTS NCCL_NET_MAX_REQUESTS_V6
#define HANDLE_MAGIC 0x4c4f4f50u /* "LOOP" */

static ncclDebugLogger_t logger;
#define LOG(level, ...) \
  do { if (logger != NULL) logger(level, NCCL_NET, __FILE__, __LINE__, __VA_ARGS__); } while (0)

struct handle {
  uint32_t magic;
  uint16_t port;
  uint16_t pad;
  struct in_addr addr;
  uint64_t nonce;
};

struct listenComm {
  int fd;
  uint64_t nonce;
};

struct comm;
struct request {
  struct comm* owner;
  int used;
  int isSend;
  char* data;
  size_t size;    /* posted (receive: at most) */
  uint64_t len;   /* the message's length (receive: once its header arrived) */
  size_t done;    /* bytes of header + data moved */
  int complete;
};

struct comm {
  int fd;
  int isSend;
  char* regBase; /* the registered range */
  size_t regBytes;
  struct request reqs[MAX_REQUESTS];
  int order[MAX_REQUESTS]; /* indexes in posting order, of requests still moving */
  int nOrder;
  int broken;
};

struct mr {
  struct comm* comm;
  char* base;
  size_t bytes;
};

static ncclResult_t loopInit(void) {
#ifdef NET_INIT_FAILS
  LOG(NCCL_LOG_INFO, "loopback net: init fails on purpose");
  return ncclSystemError;
#else
  return ncclSuccess;
#endif
}

static ncclResult_t loopDevices(int* n) {
#ifdef NET_NO_DEVICES
  *n = 0;
#else
  *n = 2;
#endif
  return ncclSuccess;
}

static void fillCommon(int dev, char** name, char** pciPath, uint64_t* guid, int* ptrSupport, int* speed, int* port,
                       float* latency, int* maxComms, int* maxRecvs) {
  *name = (char*)(dev == 0 ? "loop0" : "loop1");
  *pciPath = NULL;
  *guid = 0x1000 + (uint64_t)dev;
  *ptrSupport = NCCL_PTR_HOST;
  *speed = 10000;
  *port = 1;
  *latency = 0;
  *maxComms = 65536;
  *maxRecvs = 1;
}

static struct in_addr localAddress(void) {
  struct in_addr a;
  const char* text = getenv("NET_LOOPBACK_ADDR");
  if (text == NULL || inet_pton(AF_INET, text, &a) != 1) a.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

static uint64_t randomNonce(void) {
  uint64_t v = 0;
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    if (read(fd, &v, sizeof v) != sizeof v) v = 0;
    close(fd);
  }
  return v ^ (uint64_t)getpid() ^ ((uint64_t)(uintptr_t)&v << 16);
}

static ncclResult_t loopListen(int dev, void* opaqueHandle, void** listenComm) {
  (void)dev;
  struct handle* h = (struct handle*)opaqueHandle;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ncclSystemError;
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_addr = localAddress();
  socklen_t len = sizeof sa;
  if (bind(fd, (struct sockaddr*)&sa, sizeof sa) != 0 || listen(fd, 64) != 0 ||
      getsockname(fd, (struct sockaddr*)&sa, &len) != 0) {
    close(fd);
    return ncclSystemError;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  struct listenComm* l = calloc(1, sizeof *l);
  if (l == NULL) {
    close(fd);
    return ncclSystemError;
  }
  l->fd = fd;
  l->nonce = randomNonce();
  memset(h, 0, NCCL_NET_HANDLE_MAXSIZE);
  h->magic = HANDLE_MAGIC;
  h->port = sa.sin_port;
  h->addr = sa.sin_addr;
  h->nonce = l->nonce;
  *listenComm = l;
  return ncclSuccess;
}

static struct comm* newComm(int fd, int isSend) {
  struct comm* c = calloc(1, sizeof *c);
  if (c == NULL) return NULL;
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  c->fd = fd;
  c->isSend = isSend;
  return c;
}

/* Connects at once (loopback: the listener's backlog takes it) and presents the nonce. */
static ncclResult_t loopConnect(int dev, void* opaqueHandle, void** sendComm) {
  (void)dev;
  const struct handle* h = (const struct handle*)opaqueHandle;
  *sendComm = NULL;
  if (h->magic != HANDLE_MAGIC) return ncclInvalidArgument;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ncclSystemError;
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_port = h->port;
  sa.sin_addr = h->addr;
  if (connect(fd, (struct sockaddr*)&sa, sizeof sa) != 0 || send(fd, &h->nonce, sizeof h->nonce, MSG_NOSIGNAL) != 8) {
    LOG(NCCL_LOG_WARN, "loopback net: connect to port %d failed: %s", ntohs(h->port), strerror(errno));
    close(fd);
    return ncclSystemError;
  }
  struct comm* c = newComm(fd, 1);
  if (c == NULL) {
    close(fd);
    return ncclSystemError;
  }
  *sendComm = c;
  return ncclSuccess;
}

/* Accepts when a connection is pending; a stranger without the nonce is closed. */
static ncclResult_t loopAccept(void* listenComm, void** recvComm) {
  struct listenComm* l = (struct listenComm*)listenComm;
  *recvComm = NULL;
  int fd = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC);
  if (fd < 0) return (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) ? ncclSuccess : ncclSystemError;
  uint64_t nonce = 0;
  struct pollfd p = {fd, POLLIN, 0};
  if (poll(&p, 1, 5000) != 1 || recv(fd, &nonce, sizeof nonce, MSG_WAITALL) != 8 || nonce != l->nonce) {
    close(fd);
    return ncclSuccess;
  }
  struct comm* c = newComm(fd, 0);
  if (c == NULL) {
    close(fd);
    return ncclSystemError;
  }
  *recvComm = c;
  return ncclSuccess;
}

static ncclResult_t loopRegMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  if (type != NCCL_PTR_HOST) return ncclInternalError;
  struct mr* m = calloc(1, sizeof *m);
  if (m == NULL) return ncclSystemError;
  m->comm = (struct comm*)comm;
  m->base = (char*)data;
  m->bytes = size;
  *mhandle = m;
  return ncclSuccess;
}

static ncclResult_t loopRegMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mh) {
  (void)comm, (void)data, (void)size, (void)type, (void)offset, (void)fd, (void)mh;
  return ncclInternalError;
}

static ncclResult_t loopDeregMr(void* comm, void* mhandle) {
  struct mr* m = (struct mr*)mhandle;
  if (m == NULL || m->comm != comm) return ncclInternalError;
  free(m);
  return ncclSuccess;
}

/* A new request, after checking what Braid passes. */
static ncclResult_t post(struct comm* c, void* data, size_t size, void* mhandle, void** request) {
  const struct mr* m = (const struct mr*)mhandle;
  if (m == NULL || m->comm != c || (char*)data < m->base || size > m->bytes ||
      (size_t)((char*)data - m->base) > m->bytes - size) {
    LOG(NCCL_LOG_WARN, "loopback net: %zu bytes at %p are not in the registered memory of this comm", size, data);
    return ncclInternalError;
  }
  int used = 0, free_ = -1;
  for (int i = 0; i < MAX_REQUESTS; ++i) {
    if (c->reqs[i].used) ++used;
    else if (free_ < 0) free_ = i;
  }
  if (free_ < 0) {
    LOG(NCCL_LOG_WARN, "loopback net: more than %d requests posted on one comm", MAX_REQUESTS);
    return ncclInternalError;
  }
  (void)used;
  struct request* r = &c->reqs[free_];
  memset(r, 0, sizeof *r);
  r->owner = c;
  r->used = 1;
  r->isSend = c->isSend;
  r->data = (char*)data;
  r->size = size;
  r->len = size;
  c->order[c->nOrder++] = free_;
  *request = r;
  return ncclSuccess;
}

static ncclResult_t isendAny(void* sendComm, void* data, size_t size, void* mhandle, void** request) {
#ifdef NET_FAIL_ISEND
  static int calls = 0;
  if (__atomic_add_fetch(&calls, 1, __ATOMIC_RELAXED) == 3) {
    LOG(NCCL_LOG_INFO, "loopback net: the 3rd isend fails on purpose");
    return ncclSystemError;
  }
#endif
  struct comm* c = (struct comm*)sendComm;
  if (c == NULL || !c->isSend) return ncclInternalError;
  return post(c, data, size, mhandle, request);
}

static ncclResult_t irecvAny(void* recvComm, int n, void* data, size_t size, void* mhandle, void** request) {
  struct comm* c = (struct comm*)recvComm;
  if (c == NULL || c->isSend || n != 1) return ncclInternalError;
  return post(c, data, size, mhandle, request);
}

/* Moves the oldest requests' bytes as far as the socket allows. */
static ncclResult_t progress(struct comm* c) {
  while (c->nOrder > 0 && !c->broken) {
    struct request* r = &c->reqs[c->order[0]];
    for (;;) {
      ssize_t n;
      if (r->done < 8) {
        char* header = (char*)&r->len;
        n = r->isSend ? send(c->fd, header + r->done, 8 - r->done, MSG_NOSIGNAL | MSG_DONTWAIT)
                      : recv(c->fd, header + r->done, 8 - r->done, MSG_DONTWAIT);
      } else if (r->done - 8 < r->len) {
        const size_t off = r->done - 8;
        n = r->isSend ? send(c->fd, r->data + off, r->len - off, MSG_NOSIGNAL | MSG_DONTWAIT)
                      : recv(c->fd, r->data + off, r->len - off, MSG_DONTWAIT);
      } else {
        break;
      }
      if (n == 0 && !r->isSend) {
        c->broken = 1;  /* the peer closed */
        return ncclRemoteError;
      }
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return ncclSuccess;
        c->broken = 1;
        return ncclRemoteError;
      }
      r->done += (size_t)n;
      if (!r->isSend && r->done == 8 && r->len > r->size) {
        LOG(NCCL_LOG_WARN, "loopback net: a message of %llu bytes for a receive of %zu", (unsigned long long)r->len,
            r->size);
        c->broken = 1;
        return ncclRemoteError;
      }
    }
    r->complete = 1;
    memmove(c->order, c->order + 1, (size_t)(c->nOrder - 1) * sizeof(int));
    --c->nOrder;
  }
  return c->broken ? ncclRemoteError : ncclSuccess;
}

static ncclResult_t loopTest(void* request, int* done, int* size) {
  struct request* r = (struct request*)request;
  if (r == NULL || !r->used || r->owner == NULL) return ncclInternalError;
  *done = 0;
  if (!r->complete) {
    ncclResult_t res = progress(r->owner);
    if (res != ncclSuccess) return res;
  }
  if (r->complete) {
    *done = 1;
    if (size != NULL) *size = (int)r->len;
    r->used = 0;
  }
  return ncclSuccess;
}

static ncclResult_t closeComm(void* comm) {
  struct comm* c = (struct comm*)comm;
  if (c == NULL) return ncclSuccess;
  close(c->fd);
  free(c);
  return ncclSuccess;
}

static ncclResult_t loopCloseListen(void* listenComm) {
  struct listenComm* l = (struct listenComm*)listenComm;
  if (l == NULL) return ncclSuccess;
  close(l->fd);
  free(l);
  return ncclSuccess;
}

static ncclResult_t loopIflush(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request) {
  (void)recvComm, (void)n, (void)data, (void)sizes, (void)mhandles;
  *request = NULL;  /* host memory: nothing to flush */
  return ncclSuccess;
}

#ifdef NET_V6_ONLY

static ncclResult_t v6Init(ncclDebugLogger_t log) {
  logger = log;
  LOG(NCCL_LOG_INFO, "loopback net v6: init");
  return loopInit();
}
static ncclResult_t v6Properties(int dev, ncclNetProperties_v6_t* p) {
  if (dev < 0 || dev > 1) return ncclInvalidArgument;
  fillCommon(dev, &p->name, &p->pciPath, &p->guid, &p->ptrSupport, &p->speed, &p->port, &p->latency, &p->maxComms,
             &p->maxRecvs);
  return ncclSuccess;
}
static ncclResult_t v6RegMr(void* comm, void* data, int size, int type, void** mhandle) {
  if (size < 0) return ncclInvalidArgument;
  return loopRegMr(comm, data, (size_t)size, type, mhandle);
}
static ncclResult_t v6Isend(void* comm, void* data, int size, int tag, void* mhandle, void** request) {
  (void)tag;
  if (size < 0) return ncclInvalidArgument;
  return isendAny(comm, data, (size_t)size, mhandle, request);
}
static ncclResult_t v6Irecv(void* comm, int n, void** data, int* sizes, int* tags, void** mhandles, void** request) {
  (void)tags;
  if (n != 1 || sizes[0] < 0) return ncclInvalidArgument;
  return irecvAny(comm, n, data[0], (size_t)sizes[0], mhandles[0], request);
}

const ncclNet_v6_t ncclNetPlugin_v6 = {
    "loopback6", v6Init, loopDevices, v6Properties, loopListen, loopConnect, loopAccept, v6RegMr, loopRegMrDmaBuf,
    loopDeregMr, v6Isend, v6Irecv, loopIflush, loopTest, closeComm, closeComm, loopCloseListen};

#else

static ncclResult_t v11Init(void** ctx, uint64_t commId, ncclNetCommConfig_v11_t* config, ncclDebugLogger_t log,
                            ncclProfilerCallback_t prof) {
  (void)prof;
  logger = log;
  LOG(NCCL_LOG_INFO, "loopback net: init comm %#llx traffic class %d", (unsigned long long)commId,
      config != NULL ? config->trafficClass : -2);
  ncclResult_t r = loopInit();
  if (r != ncclSuccess) return r;
  *ctx = calloc(1, 64);
  return *ctx != NULL ? ncclSuccess : ncclSystemError;
}
static ncclResult_t v11Finalize(void* ctx) {
  LOG(NCCL_LOG_INFO, "loopback net: finalize");
  free(ctx);
  return ncclSuccess;
}
static ncclResult_t v11Properties(int dev, ncclNetProperties_v11_t* p) {
  if (dev < 0 || dev > 1) return ncclInvalidArgument;
  memset(p, 0, sizeof *p);
  fillCommon(dev, &p->name, &p->pciPath, &p->guid, &p->ptrSupport, &p->speed, &p->port, &p->latency, &p->maxComms,
             &p->maxRecvs);
  p->netDeviceType = NCCL_NET_DEVICE_HOST;
  p->vProps.ndevs = 1;
  p->vProps.devs[0] = dev;
  p->maxP2pBytes = NCCL_MAX_NET_SIZE_BYTES;
  p->maxCollBytes = NCCL_MAX_NET_SIZE_BYTES;
  p->maxMultiRequestSize = 1;
  return ncclSuccess;
}
static ncclResult_t v11Listen(void* ctx, int dev, void* handle, void** listenComm) {
  if (ctx == NULL) return ncclInternalError;
  return loopListen(dev, handle, listenComm);
}
static ncclResult_t v11Connect(void* ctx, int dev, void* handle, void** sendComm, ncclNetDeviceHandle_v11_t** devComm) {
  (void)devComm;
  if (ctx == NULL) return ncclInternalError;
  return loopConnect(dev, handle, sendComm);
}
static ncclResult_t v11Accept(void* listenComm, void** recvComm, ncclNetDeviceHandle_v11_t** devComm) {
  (void)devComm;
  return loopAccept(listenComm, recvComm);
}
static ncclResult_t v11Isend(void* comm, void* data, size_t size, int tag, void* mhandle, void* phandle, void** request) {
  (void)tag, (void)phandle;
  return isendAny(comm, data, size, mhandle, request);
}
static ncclResult_t v11Irecv(void* comm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** phandles,
                             void** request) {
  (void)tags, (void)phandles;
  if (n != 1) return ncclInvalidArgument;
  return irecvAny(comm, n, data[0], sizes[0], mhandles[0], request);
}

#ifdef NET_NO_SYMBOL
#define NET_SYMBOL ncclNetPlugin_unversioned
#else
#define NET_SYMBOL ncclNetPlugin_v11
#endif

const ncclNet_v11_t NET_SYMBOL = {
#ifdef NET_FAIL_ISEND
    "loopback-failing",
#else
    "loopback",
#endif
    v11Init, loopDevices, v11Properties, v11Listen, v11Connect, v11Accept, loopRegMr, loopRegMrDmaBuf, loopDeregMr,
    v11Isend, v11Irecv, loopIflush, loopTest, closeComm, closeComm, loopCloseListen, NULL, NULL, NULL, v11Finalize, NULL};

/* Seen by Braid and left alone: it runs no CollNet. */
const ncclCollNet_v9_t ncclCollNetPlugin_v9 = {.name = "loopback-collnet"};

#endif
