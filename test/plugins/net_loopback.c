/*
 * A net plugin for Braid's tests, written against include/nccl_net.h: TCP between processes
 * (127.0.0.1, or NET_LOOPBACK_ADDR, or the IPv4 address of the interface NCCL_SOCKET_IFNAME
 * names exactly), host memory only, 2 devices (both the same address), maxRecvs 1. Exports
 * ncclNetPlugin_v11 (and, to be seen and left alone, a ncclCollNetPlugin_v9 whose functions are
 * NULL), or with -DNET_V6_ONLY only ncclNetPlugin_v6.
 *
 * Every message is a 16-byte header (its length and tag), then its bytes; requests on a comm
 * move in the order they were posted, progressed by test. A receive request takes the next
 * messages of the stream, one per receive, each landing in the receive whose tag it carries.
 * The plugin checks what Braid does: more than NCCL_NET_MAX_REQUESTS_V6 (8) requests on a
 * comm, an irecv of more receives than maxRecvs, a memory handle that is not the comm's, data
 * outside the registered range, or a message whose tag no receive of the request waits for,
 * fail the call (and say so in the log).
 *
 * -DNET_MAX_RECVS=8: maxRecvs 8, and an irecv takes 1..8 receives (each its own buffer, size
 * and tag) in one request, done when all are, whose test reports each one's size.
 *
 * NET_LOOPBACK_PROFILE=1 (v11): each isend and irecv starts a NetPlugin event through the
 * profiler callback init got, with the call's phandle, NCCL_PROFILER_NET_TYPE_SOCK | 1 as its id
 * and the request as its data; test stops it when the request is done (a send's: Update, then
 * Stop; a receive's: UpdateAndStop); a call without a phandle starts none.
 * NET_LOOPBACK_PROFILE=bad: each call given a phandle hands back one of its own instead (an
 * address Braid never gave), and stops an event handle it made up; what the callback answers is logged ("loopback net: the profiler callback answered N to a bad ...").
 * GPU memory (emulated_device_test.cc, where the "GPU" is host memory and memory files):
 * NET_LOOPBACK_PTR=cuda, dmabuf or cuda,dmabuf adds NCCL_PTR_CUDA and/or NCCL_PTR_DMABUF to
 * what the devices report (v11), and regMr (NCCL_PTR_CUDA) / regMrDmaBuf then take such
 * memory: a dma-buf is mapped from its descriptor and every byte of the region moves through
 * that mapping, so a wrong descriptor or offset shows in the data. NET_LOOPBACK_FORCE_FLUSH=1
 * reports forceFlush, and the device then behaves as one that needs it: what it receives into GPU
 * memory reaches that memory only when an iflush covering it is done, so a receiver that reads
 * before its flush (or never flushes) sees stale bytes. iflush answers a request (done at its
 * second test) for GPU memory and none for host memory. NET_LOOPBACK_RECORD=file appends a line per regMr ("regMr TYPE BYTES"),
 * regMrDmaBuf ("regMrDmaBuf TYPE BYTES") and iflush ("iflush TYPE BYTES") for the test to count.
 * NET_LOOPBACK_RECORD also gets a line per listen and connect: "listen dev D", "connect dev D".
 * NET_LOOPBACK_SILENT_LOSS=1: a comm whose connection broke (the peer's process ended) never
 * says so: its requests stay not done, and test keeps answering ncclSuccess, as a plugin that
 * notices no vanished peer would (Braid must notice it by other means).
 * NET_LOOPBACK_SENDS=file appends a line per isend: its size and (in hex) its first 64 bytes.
 * NET_LOOPBACK_FIRST_SEND_STALL_MS=N: the first isend on each send comm answers no request
 * (not now) for N ms after its first try, as a plugin that finishes its connection setup in
 * its first send stalls it (Google's FastSocket); later isends are not held.
 * NET_LOOPBACK_REFUSE_GPU=send (or recv) makes registrations of GPU memory on send (receive)
 * comms fail with ncclSystemError, recorded as "refused TYPE BYTES".
 *
 * -DNET_NO_SIZE (with -DNET_V6_ONLY: "loopback-nosize"): test never writes *sizes, on sends,
 * receives and flushes alike, as some widely used plugins do (NCCL never reads them but to
 * decide on a flush); Braid must know each step's size without them.
 *
 * -DNET_BLOCKING_ACCEPT (with -DNET_V6_ONLY: "loopback-blocking"): accept blocks until a
 * connection is pending (20 s at most, then fails, saying so), as a widely used v6 plugin's
 * does (Google's FastSocket) although the interface asks it not to: under NCCL it works, since
 * a setup round calls its connects before its accepts.
 *
 * -DNET_STRICT ("loopback-strict"): the rules of a widely used libfabric plugin, asserted
 * (net_strict.h): one thread per comm, setup never concurrent with data calls on a device, and
 * a comm closed with requests in flight invalidates its device's endpoint.
 *
 * Variants for the bad-plugin tests: -DNET_FAIL_ISEND (the 3rd isend of the process fails with
 * ncclSystemError), -DNET_INIT_FAILS, -DNET_NO_DEVICES (devices() reports 0), -DNET_NO_SYMBOL
 * (exports no ncclNetPlugin_v* symbol).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "nccl_net.h"
#include "nccl_profiler.h" /* NCCL_PROFILER_NET_TYPE_SOCK */

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
#ifdef NET_MAX_RECVS
#define MAX_RECVS NET_MAX_RECVS
#else
#define MAX_RECVS 1
#endif
LAYOUT(maxRecvs, MAX_RECVS >= 1 && MAX_RECVS <= NCCL_NET_MAX_REQUESTS);
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
  int dev;
  uint64_t nonce;
};

/* What precedes every message on the stream. */
struct wire {
  uint64_t len;
  int32_t tag;
  uint32_t pad;
};
#define HEADER ((size_t)sizeof(struct wire))

/* One buffer of a request: a send's, or one receive of an irecv. */
struct part {
  char* data;
  char* target; /* a late write's GPU memory (data is then its shadow), or NULL */
  size_t size;  /* posted (receive: at most) */
  int tag;
  uint64_t len; /* what arrived (receive), once filled */
  int filled;
};

struct comm;
struct request {
  struct comm* owner;
  int used;
  int isSend;
  int flushTests; /* an iflush's request: its tests so far (-1: not one) */
  int n; /* parts */
  struct part parts[MAX_RECVS];
  int nDone;        /* parts whose message has moved */
  int cur;          /* the part the current message is for; receive: -1 until its header is in */
  struct wire head; /* the current message's header */
  size_t done;      /* bytes of the current message (header + data) moved */
  void* event;      /* NET_LOOPBACK_PROFILE: its NetPlugin event (NULL: the profiler gave none) */
  int profiled;     /* its event was asked for: it is stopped when the request is done */
  ncclProfilerNetSockDescr_v1_t descr; /* the event's data, as NCCL's socket transport gives */
};

struct comm {
  int fd;
  int isSend;
  int dev;
  int owned;       /* NET_STRICT: owner made a data call on it */
  pthread_t owner;
  char* regBase; /* the registered range */
  size_t regBytes;
  struct request reqs[MAX_REQUESTS];
  int order[MAX_REQUESTS]; /* indexes in posting order, of requests still moving */
  int nOrder;
  int broken;
  int sends;                /* isends posted */
  long long firstTryMs;     /* NET_LOOPBACK_FIRST_SEND_STALL_MS: when the first isend was tried (0: not yet) */
  struct late { /* received into GPU memory, waiting for an iflush (forceFlush) */
    char* target;
    char* shadow;
    size_t len;
  } late[MAX_REQUESTS * MAX_RECVS];
  int nLate;
};

struct mr {
  struct comm* comm;
  char* base;
  size_t bytes;
  int type;      /* NCCL_PTR_HOST, NCCL_PTR_CUDA, NCCL_PTR_DMABUF */
  char* mapping; /* a dma-buf's mapping (mapBytes from its page), through which its bytes move */
  size_t mapBytes;
  char* mapped;  /* base in the mapping */
};

/* NET_LOOPBACK_PROFILE (v11 only): 1 for events, 2 for bad handles; the callback init got. */
static int profileMode;
static ncclProfilerCallback_t profiler;

/* A done request's NetPlugin event ends (see the file comment). */
static void profileDone(struct request* r) {
  if (profiler == NULL) return;
  if (profileMode == 2) {
    void* madeUp = (void*)&profileMode;
    const ncclResult_t a = profiler(&madeUp, ncclProfilerNetEventStop, NULL, 0, NULL);
    LOG(NCCL_LOG_INFO, "loopback net: the profiler callback answered %d to a bad event handle", (int)a);
    return;
  }
  if (r->isSend) {
    profiler(&r->event, ncclProfilerNetEventUpdate, NULL, 0, r);
    profiler(&r->event, ncclProfilerNetEventStop, NULL, 0, NULL);
  } else {
    profiler(&r->event, ncclProfilerNetEventUpdateAndStop, NULL, 0, r);
  }
  r->event = NULL;
}

/* The NCCL_PTR_* bits NET_LOOPBACK_PTR adds to host memory. */
static int extraPtrSupport(void) {
  const char* text = getenv("NET_LOOPBACK_PTR");
  int bits = 0;
  if (text != NULL && strstr(text, "cuda") != NULL) bits |= NCCL_PTR_CUDA;
  if (text != NULL && strstr(text, "dmabuf") != NULL) bits |= NCCL_PTR_DMABUF;
  return bits;
}

/* One line in NET_LOOPBACK_RECORD's file (when set). */
static void record(const char* call, int type, size_t bytes) {
  const char* path = getenv("NET_LOOPBACK_RECORD");
  if (path == NULL) return;
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return;
  const char* name = type == NCCL_PTR_DMABUF ? "dmabuf" : type == NCCL_PTR_CUDA ? "cuda" : "host";
  dprintf(fd, "%s %s %zu\n", call, name, bytes);
  close(fd);
}

/* "listen dev D" or "connect dev D" in NET_LOOPBACK_RECORD's file (when set). */
static void recordDevice(const char* call, int dev) {
  const char* path = getenv("NET_LOOPBACK_RECORD");
  if (path == NULL) return;
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return;
  dprintf(fd, "%s dev %d\n", call, dev);
  close(fd);
}

/* What a broken connection's calls answer: ncclRemoteError, or with NET_LOOPBACK_SILENT_LOSS=1
 * nothing (its requests never finish). */
static ncclResult_t lossResult(void) {
  const char* text = getenv("NET_LOOPBACK_SILENT_LOSS");
  return text != NULL && text[0] == '1' ? ncclSuccess : ncclRemoteError;
}

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
#ifndef NET_V6_ONLY
  *ptrSupport |= extraPtrSupport();
#endif
  *speed = 10000;
  *port = 1;
  *latency = 0;
  *maxComms = 65536;
  *maxRecvs = MAX_RECVS;
}

/* NET_LOOPBACK_ADDR, else the IPv4 address of the one interface NCCL_SOCKET_IFNAME names
 * ("eth0" or "=eth0"; lists and prefixes are not looked at), else 127.0.0.1: ranks in separate
 * network namespaces listen on their own namespace's address. */
static struct in_addr localAddress(void) {
  struct in_addr a;
  a.s_addr = htonl(INADDR_LOOPBACK);
  const char* text = getenv("NET_LOOPBACK_ADDR");
  if (text != NULL) {
    if (inet_pton(AF_INET, text, &a) != 1) a.s_addr = htonl(INADDR_LOOPBACK);
    return a;
  }
  const char* name = getenv("NCCL_SOCKET_IFNAME");
  if (name == NULL) return a;
  if (name[0] == '=') ++name;
  struct ifaddrs* list = NULL;
  if (name[0] == '\0' || strchr(name, ',') != NULL || getifaddrs(&list) != 0) return a;
  for (struct ifaddrs* i = list; i != NULL; i = i->ifa_next) {
    if (i->ifa_addr != NULL && i->ifa_addr->sa_family == AF_INET && strcmp(i->ifa_name, name) == 0) {
      a = ((const struct sockaddr_in*)i->ifa_addr)->sin_addr;
      break;
    }
  }
  freeifaddrs(list);
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
  recordDevice("listen", dev);
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
  l->dev = dev;
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
  recordDevice("connect", dev);
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
  c->dev = dev;
  *sendComm = c;
  return ncclSuccess;
}

/* Accepts when a connection is pending; a stranger without the nonce is closed. */
static ncclResult_t loopAccept(void* listenComm, void** recvComm) {
  struct listenComm* l = (struct listenComm*)listenComm;
  *recvComm = NULL;
#ifdef NET_BLOCKING_ACCEPT
  struct pollfd pending = {l->fd, POLLIN, 0};
  if (poll(&pending, 1, 20000) != 1) {
    LOG(NCCL_LOG_WARN, "loopback net (blocking): no connection came within 20 s of accept");
    return ncclSystemError;
  }
#endif
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
  c->dev = l->dev;
  *recvComm = c;
  return ncclSuccess;
}

/* Whether NET_LOOPBACK_REFUSE_GPU refuses GPU memory on comm c (recorded when so). */
static int refusesGpu(const void* comm, int type, size_t size) {
  const char* side = getenv("NET_LOOPBACK_REFUSE_GPU");
  const struct comm* c = (const struct comm*)comm;
  if (side == NULL || strcmp(side, c->isSend ? "send" : "recv") != 0) return 0;
  record("refused", type, size);
  LOG(NCCL_LOG_INFO, "loopback net: registration of GPU memory refused on purpose");
  return 1;
}

static ncclResult_t loopRegMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  const int supported = NCCL_PTR_HOST | (extraPtrSupport() & NCCL_PTR_CUDA);
  if ((type != NCCL_PTR_HOST && type != NCCL_PTR_CUDA) || (type & supported) == 0 || comm == NULL || data == NULL) {
    LOG(NCCL_LOG_WARN, "loopback net: regMr of memory type %d, which this device does not report", type);
    return ncclInternalError;
  }
  if (type == NCCL_PTR_CUDA && refusesGpu(comm, type, size)) return ncclSystemError;
  struct mr* m = calloc(1, sizeof *m);
  if (m == NULL) return ncclSystemError;
  m->comm = (struct comm*)comm;
  m->base = (char*)data;
  m->bytes = size;
  m->type = type;
  record("regMr", type, size);
  *mhandle = m;
  return ncclSuccess;
}

static ncclResult_t loopRegMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mh) {
  if ((extraPtrSupport() & NCCL_PTR_DMABUF) == 0 || type != NCCL_PTR_CUDA || comm == NULL || data == NULL || fd < 0 ||
      size == 0) {
    LOG(NCCL_LOG_WARN, "loopback net: regMrDmaBuf of type %d, fd %d, %zu bytes refused", type, fd, size);
    return ncclInternalError;
  }
  if (refusesGpu(comm, NCCL_PTR_DMABUF, size)) return ncclSystemError;
  const long page = sysconf(_SC_PAGESIZE);
  const uint64_t start = offset / (uint64_t)page * (uint64_t)page;
  const size_t mapBytes = (size_t)(offset - start) + size;
  void* mapping = mmap(NULL, mapBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)start);
  if (mapping == MAP_FAILED) {
    LOG(NCCL_LOG_WARN, "loopback net: cannot map the dma-buf (fd %d, offset %llu): %s", fd, (unsigned long long)offset,
        strerror(errno));
    return ncclSystemError;
  }
  struct mr* m = calloc(1, sizeof *m);
  if (m == NULL) {
    munmap(mapping, mapBytes);
    return ncclSystemError;
  }
  m->comm = (struct comm*)comm;
  m->base = (char*)data;
  m->bytes = size;
  m->type = NCCL_PTR_DMABUF;
  m->mapping = (char*)mapping;
  m->mapBytes = mapBytes;
  m->mapped = (char*)mapping + (offset - start);
  record("regMrDmaBuf", type, size);
  *mh = m;
  return ncclSuccess;
}

static ncclResult_t loopDeregMr(void* comm, void* mhandle) {
  struct mr* m = (struct mr*)mhandle;
  if (m == NULL || m->comm != comm) return ncclInternalError;
  if (m->mapping != NULL) munmap(m->mapping, m->mapBytes);
  free(m);
  return ncclSuccess;
}

static int lateWrites(void) {
  const char* force = getenv("NET_LOOPBACK_FORCE_FLUSH");
  return force != NULL && strcmp(force, "1") == 0;
}

/* Late writes covered by [at, at + len) reach their GPU memory (an iflush is done). */
static void applyLate(struct comm* c, const char* at, size_t len) {
  for (int i = 0; i < c->nLate;) {
    struct late* l = &c->late[i];
    if (l->target >= at && l->target + l->len <= at + len) {
      memcpy(l->target, l->shadow, l->len);
      free(l->shadow);
      c->late[i] = c->late[--c->nLate];
    } else {
      ++i;
    }
  }
}

/* Where the plugin moves the bytes of data (in mhandle's range): through a dma-buf's mapping. */
static char* moveAddress(const void* mhandle, void* data) {
  const struct mr* m = (const struct mr*)mhandle;
  return m->mapped != NULL ? m->mapped + ((char*)data - m->base) : (char*)data;
}

/* Whether size bytes at data lie in the comm's registered memory mhandle (else says so). */
static int inRegistered(const struct comm* c, const void* data, size_t size, const void* mhandle) {
  const struct mr* m = (const struct mr*)mhandle;
  if (m == NULL || m->comm != c || (const char*)data < m->base || size > m->bytes ||
      (size_t)((const char*)data - m->base) > m->bytes - size) {
    LOG(NCCL_LOG_WARN, "loopback net: %zu bytes at %p are not in the registered memory of this comm", size, data);
    return 0;
  }
  return 1;
}

/* NET_LOOPBACK_SENDS=file: a line per isend, "isend SIZE HEX" with the message's first (at
 * most 64) bytes in hex, for the test to see how each step travels (Braid's record leads it). */
static void recordSend(const void* data, size_t size) {
  const char* path = getenv("NET_LOOPBACK_SENDS");
  if (path == NULL) return;
  char line[200];
  int n = snprintf(line, sizeof line, "isend %zu ", size);
  for (size_t i = 0; i < size && i < 64; ++i) n += snprintf(line + n, sizeof line - (size_t)n, "%02x", ((const unsigned char*)data)[i]);
  line[n++] = '\n';
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return;
  if (write(fd, line, (size_t)n) != n) LOG(NCCL_LOG_WARN, "loopback net: cannot write %s", path);
  close(fd);
}

/* A new request of n parts, after checking what Braid passes. */
static ncclResult_t post(struct comm* c, int n, void** data, const size_t* sizes, const int* tags, void** mhandles,
                         void** request) {
  for (int i = 0; i < n; ++i)
    if (!inRegistered(c, data[i], sizes[i], mhandles[i])) return ncclInternalError;
  int free_ = -1;
  for (int i = 0; i < MAX_REQUESTS && free_ < 0; ++i)
    if (!c->reqs[i].used) free_ = i;
  if (free_ < 0) {
    LOG(NCCL_LOG_WARN, "loopback net: more than %d requests posted on one comm", MAX_REQUESTS);
    return ncclInternalError;
  }
  struct request* r = &c->reqs[free_];
  memset(r, 0, sizeof *r);
  r->owner = c;
  r->used = 1;
  r->isSend = c->isSend;
  r->flushTests = -1;
  r->n = n;
  for (int i = 0; i < n; ++i) {
    r->parts[i].data = moveAddress(mhandles[i], data[i]);
    if (!c->isSend && lateWrites() && ((const struct mr*)mhandles[i])->type != NCCL_PTR_HOST) {
      r->parts[i].target = r->parts[i].data;
      r->parts[i].data = malloc(sizes[i] > 0 ? sizes[i] : 1);
      if (r->parts[i].data == NULL) return ncclSystemError;
    }
    r->parts[i].size = sizes[i];
    r->parts[i].tag = tags[i];
  }
  r->cur = c->isSend ? 0 : -1;
  if (c->isSend) {
    recordSend(r->parts[0].data, sizes[0]);
    r->head.len = sizes[0];
    r->head.tag = tags[0];
  }
  c->order[c->nOrder++] = free_;
  *request = r;
  return ncclSuccess;
}

static long long monotonicMs(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* NET_LOOPBACK_FIRST_SEND_STALL_MS: whether c's first isend must still wait. */
static int firstSendStalled(struct comm* c) {
  const char* text = getenv("NET_LOOPBACK_FIRST_SEND_STALL_MS");
  const long long stall = text != NULL ? atoll(text) : 0;
  if (stall <= 0) return 0;
  const long long now = monotonicMs();
  if (c->firstTryMs == 0) {
    c->firstTryMs = now;
    LOG(NCCL_LOG_INFO, "loopback net: the first isend on this comm waits %lld ms", stall);
  }
  return now - c->firstTryMs < stall;
}

static ncclResult_t isendAny(void* sendComm, void* data, size_t size, int tag, void* mhandle, void** request) {
#ifdef NET_FAIL_ISEND
  static int calls = 0;
  if (__atomic_add_fetch(&calls, 1, __ATOMIC_RELAXED) == 3) {
    LOG(NCCL_LOG_INFO, "loopback net: the 3rd isend fails on purpose");
    return ncclSystemError;
  }
#endif
  struct comm* c = (struct comm*)sendComm;
  if (c == NULL || !c->isSend) return ncclInternalError;
  if (c->sends == 0 && firstSendStalled(c)) {
    *request = NULL;
    return ncclSuccess;
  }
  const ncclResult_t r = post(c, 1, &data, &size, &tag, &mhandle, request);
  if (r == ncclSuccess && *request != NULL) ++c->sends;
  return r;
}

static ncclResult_t irecvAny(void* recvComm, int n, void** data, const size_t* sizes, const int* tags, void** mhandles,
                             void** request) {
  struct comm* c = (struct comm*)recvComm;
  if (c == NULL || c->isSend) return ncclInternalError;
  if (n < 1 || n > MAX_RECVS) {
    LOG(NCCL_LOG_WARN, "loopback net: an irecv of %d receives; this plugin reports maxRecvs %d", n, MAX_RECVS);
    return ncclInvalidArgument;
  }
  return post(c, n, data, sizes, tags, mhandles, request);
}

/* Moves up to len bytes at at through the comm's socket: 1 when some moved, 0 when the socket
 * would block, -1 when the connection broke (the peer closed, or an error). */
static int moveBytes(struct comm* c, int isSend, char* at, size_t len, size_t* moved) {
  ssize_t n = isSend ? send(c->fd, at, len, MSG_NOSIGNAL | MSG_DONTWAIT) : recv(c->fd, at, len, MSG_DONTWAIT);
  if (n > 0) {
    *moved += (size_t)n;
    return 1;
  }
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 0;
  c->broken = 1;
  return -1;
}

/* The receive of r that a message with this header lands in: the first unfilled one with its
 * tag (-1, said in the log, when none waits for it or it does not fit). */
static int matchReceive(const struct request* r) {
  for (int i = 0; i < r->n; ++i) {
    const struct part* p = &r->parts[i];
    if (p->filled || p->tag != r->head.tag) continue;
    if (r->head.len > p->size) {
      LOG(NCCL_LOG_WARN, "loopback net: a message of %llu bytes for a receive of %zu",
          (unsigned long long)r->head.len, p->size);
      return -1;
    }
    return i;
  }
  LOG(NCCL_LOG_WARN, "loopback net: a message with tag %d matches none of the %d receive(s) of its request",
      r->head.tag, r->n);
  return -1;
}

/* Moves request r's messages as far as the socket allows: 1 when all moved, 0 when the socket
 * would block, -1 when the connection broke. */
static int progressRequest(struct comm* c, struct request* r) {
  while (r->nDone < r->n) {
    int m;
    if (r->done < HEADER) {
      m = moveBytes(c, r->isSend, (char*)&r->head + r->done, HEADER - r->done, &r->done);
      if (m <= 0) return m;
      if (r->done == HEADER && !r->isSend && (r->cur = matchReceive(r)) < 0) {
        c->broken = 1;
        return -1;
      }
      continue;
    }
    struct part* p = &r->parts[r->cur];
    const size_t off = r->done - HEADER;
    if (off < r->head.len) {
      m = moveBytes(c, r->isSend, p->data + off, r->head.len - off, &r->done);
      if (m <= 0) return m;
      continue;
    }
    p->len = r->head.len;
    p->filled = 1;
    ++r->nDone;
    r->done = 0;
    if (!r->isSend) r->cur = -1;
  }
  return 1;
}

/* Moves the oldest requests' messages as far as the socket allows. */
static ncclResult_t progress(struct comm* c) {
  while (c->nOrder > 0 && !c->broken) {
    const int m = progressRequest(c, &c->reqs[c->order[0]]);
    if (m < 0) return lossResult();
    if (m == 0) return ncclSuccess;
    memmove(c->order, c->order + 1, (size_t)(c->nOrder - 1) * sizeof(int));
    --c->nOrder;
  }
  return c->broken ? lossResult() : ncclSuccess;
}

/* sizes (when not NULL) gets the size of each of the request's messages: one for a send, one
 * per receive for an irecv. */
static ncclResult_t loopTest(void* request, int* done, int* sizes) {
  (void)sizes; /* (unused with -DNET_NO_SIZE) */
  struct request* r = (struct request*)request;
  if (r == NULL || !r->used || r->owner == NULL) return ncclInternalError;
  *done = 0;
  if (r->flushTests >= 0) { /* an iflush: done at its second test, so Braid has to wait for it */
    if (++r->flushTests < 2) return ncclSuccess;
    applyLate(r->owner, r->parts[0].data, r->parts[0].size);
    *done = 1;
#ifndef NET_NO_SIZE
    if (sizes != NULL) sizes[0] = 0;
#endif
    r->used = 0;
    return ncclSuccess;
  }
  if (r->nDone < r->n) {
    ncclResult_t res = progress(r->owner);
    if (res != ncclSuccess) return res;
  }
  if (r->nDone == r->n) {
    struct comm* c = r->owner;
    for (int i = 0; i < r->n; ++i) {
      if (r->parts[i].target == NULL) continue;
      if (c->nLate == MAX_REQUESTS * MAX_RECVS) return ncclInternalError;
      c->late[c->nLate++] = (struct late){r->parts[i].target, r->parts[i].data, r->parts[i].len};
    }
    *done = 1;
#ifndef NET_NO_SIZE /* (-DNET_NO_SIZE: *sizes is never written, as some plugins do) */
    if (sizes != NULL)
      for (int i = 0; i < r->n; ++i) sizes[i] = (int)r->parts[i].len;
#endif
    if (r->profiled) profileDone(r);
    r->used = 0;
  }
  return ncclSuccess;
}

static ncclResult_t closeComm(void* comm) {
  struct comm* c = (struct comm*)comm;
  if (c == NULL) return ncclSuccess;
  close(c->fd);
  for (int i = 0; i < c->nLate; ++i) free(c->late[i].shadow);
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

/* A flush of GPU memory is a request of its own (counted against MAX_REQUESTS, outside the
 * stream's order); host memory needs none. */
static ncclResult_t loopIflush(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request) {
  struct comm* c = (struct comm*)recvComm;
  *request = NULL;
  if (c == NULL || c->isSend || n < 1 || n > MAX_RECVS) return ncclInternalError;
  int gpu = 0;
  for (int i = 0; i < n; ++i) {
    if (sizes[i] < 0 || !inRegistered(c, data[i], (size_t)sizes[i], mhandles[i])) return ncclInternalError;
    const int type = ((const struct mr*)mhandles[i])->type;
    record("iflush", type, (size_t)sizes[i]);
    gpu |= type != NCCL_PTR_HOST;
  }
  if (!gpu) return ncclSuccess;
  for (int i = 0; i < MAX_REQUESTS; ++i) {
    struct request* r = &c->reqs[i];
    if (r->used) continue;
    memset(r, 0, sizeof *r);
    r->owner = c;
    r->used = 1;
    r->flushTests = 0;
    r->parts[0].data = moveAddress(mhandles[0], data[0]); /* (Braid flushes one receive at a time) */
    r->parts[0].size = (size_t)sizes[0];
    *request = r;
    return ncclSuccess;
  }
  LOG(NCCL_LOG_WARN, "loopback net: an iflush beyond %d requests on one comm", MAX_REQUESTS);
  return ncclInternalError;
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
  if (size < 0) return ncclInvalidArgument;
  return isendAny(comm, data, (size_t)size, tag, mhandle, request);
}
static ncclResult_t v6Irecv(void* comm, int n, void** data, int* sizes, int* tags, void** mhandles, void** request) {
  size_t wide[MAX_RECVS];
  for (int i = 0; i < n && i < MAX_RECVS; ++i) {
    if (sizes[i] < 0) return ncclInvalidArgument;
    wide[i] = (size_t)sizes[i];
  }
  return irecvAny(comm, n, data, wide, tags, mhandles, request);
}

const ncclNet_v6_t ncclNetPlugin_v6 = {
#if defined(NET_NO_SIZE)
    "loopback-nosize",
#elif defined(NET_BLOCKING_ACCEPT)
    "loopback-blocking",
#else
    "loopback6",
#endif
    v6Init, loopDevices, v6Properties, loopListen, loopConnect, loopAccept, v6RegMr, loopRegMrDmaBuf,
    loopDeregMr, v6Isend, v6Irecv, loopIflush, loopTest, closeComm, closeComm, loopCloseListen};

#else

/* A posted request's NetPlugin event starts, under the call's phandle. */
static void profilePosted(void* request, void* phandle) {
  struct request* r = (struct request*)request;
  if (profiler == NULL || profileMode == 0 || r == NULL) return;
  if (phandle == NULL) return; /* (Braid names no parent for it: no event) */
  r->profiled = 1;
  if (profileMode == 2) {
    void* ignored = NULL;
    const ncclResult_t a =
        profiler(&ignored, ncclProfilerNetEventStart, &profileMode, NCCL_PROFILER_NET_TYPE_SOCK | 1, r);
    LOG(NCCL_LOG_INFO, "loopback net: the profiler callback answered %d to a bad phandle (event %s)", (int)a,
        ignored != NULL ? "given" : "none");
    return;
  }
  memset(&r->descr, 0, sizeof r->descr);
  r->descr.type = ncclProfileSocket;
  r->descr.sock.fd = -1; /* (the comm's, not one socket of its own) */
  r->descr.sock.op = r->isSend ? 0 : 1;
  r->descr.sock.length = r->parts[0].size;
  profiler(&r->event, ncclProfilerNetEventStart, phandle, NCCL_PROFILER_NET_TYPE_SOCK | NCCL_PROFILER_NET_SOCKET_VER,
           &r->descr);
}

static ncclResult_t v11Init(void** ctx, uint64_t commId, ncclNetCommConfig_v11_t* config, ncclDebugLogger_t log,
                            ncclProfilerCallback_t prof) {
  logger = log;
  const char* mode = getenv("NET_LOOPBACK_PROFILE");
  profileMode = mode == NULL ? 0 : strcmp(mode, "bad") == 0 ? 2 : atoi(mode) != 0 ? 1 : 0;
  profiler = prof;
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
  const char* force = getenv("NET_LOOPBACK_FORCE_FLUSH");
  p->forceFlush = force != NULL && strcmp(force, "1") == 0;
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
  const ncclResult_t r = isendAny(comm, data, size, tag, mhandle, request);
  if (r == ncclSuccess) profilePosted(*request, phandle);
  return r;
}
static ncclResult_t v11Irecv(void* comm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** phandles,
                             void** request) {
  const ncclResult_t r = irecvAny(comm, n, data, sizes, tags, mhandles, request);
  if (r == ncclSuccess) profilePosted(*request, phandles != NULL ? phandles[0] : NULL);
  return r;
}

#ifdef NET_NO_SYMBOL
#define NET_SYMBOL ncclNetPlugin_unversioned
#else
#define NET_SYMBOL ncclNetPlugin_v11
#endif

#ifdef NET_STRICT
#include "net_strict.h"

const ncclNet_v11_t ncclNetPlugin_v11 = {
    "loopback-strict", v11Init, loopDevices, v11Properties, strictListen, strictConnect, strictAccept, strictRegMr,
    loopRegMrDmaBuf, loopDeregMr, strictIsend, strictIrecv, loopIflush, strictTest, strictClose, strictClose,
    loopCloseListen, NULL, NULL, NULL, v11Finalize, NULL};
#else
const ncclNet_v11_t NET_SYMBOL = {
#if defined(NET_FAIL_ISEND)
    "loopback-failing",
#elif defined(NET_MAX_RECVS)
    "loopback-recvs",
#else
    "loopback",
#endif
    v11Init, loopDevices, v11Properties, v11Listen, v11Connect, v11Accept, loopRegMr, loopRegMrDmaBuf, loopDeregMr,
    v11Isend, v11Irecv, loopIflush, loopTest, closeComm, closeComm, loopCloseListen, NULL, NULL, NULL, v11Finalize, NULL};
#endif

/* Seen by Braid and left alone: it runs no CollNet. */
const ncclCollNet_v9_t ncclCollNetPlugin_v9 = {.name = "loopback-collnet"};

#endif
