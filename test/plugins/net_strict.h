/*
 * -DNET_STRICT ("loopback-strict"): the loopback net plugin with the rules a widely used
 * libfabric plugin enforces, as assertions, for the plugin tests (included by net_loopback.c
 * after its own definitions):
 *  - one thread per comm: the thread of a comm's first isend, irecv or test owns it; a later
 *    isend, irecv, test or close of that comm from another thread ends the process (abort);
 *  - setup never concurrent with data calls: listen, connect, accept or regMr on a device while
 *    another thread is inside a call on that device (or the reverse) ends the process;
 *  - no close with requests in flight: closing a comm that has one invalidates its device's
 *    endpoint in this process (every later isend, irecv or test there returns ncclSystemError,
 *    "... inactive endpoint") and resets the connection, so the peer's calls fail too.
 * Each is said in the log (NCCL WARN) before it acts.
 */
#include <pthread.h>

static pthread_mutex_t strictLock = PTHREAD_MUTEX_INITIALIZER;
static int strictDepth[2];         /* per device: calls in progress ... */
static pthread_t strictThread[2];  /* ... and the thread making them */
static int strictDead[2];          /* per device: its endpoint was invalidated */

static void strictDie(const char* what) {
  LOG(NCCL_LOG_WARN, "loopback net (strict): %s", what);
  fprintf(stderr, "loopback net (strict): %s\n", what);
  abort();
}

static void strictEnter(int dev, const char* call) {
  pthread_mutex_lock(&strictLock);
  const int clash = strictDepth[dev & 1] > 0 && !pthread_equal(strictThread[dev & 1], pthread_self());
  strictThread[dev & 1] = pthread_self();
  ++strictDepth[dev & 1];
  pthread_mutex_unlock(&strictLock);
  if (clash) {
    char text[160];
    snprintf(text, sizeof text, "%s on device %d while another thread is inside a call on it", call, dev);
    strictDie(text);
  }
}

static void strictLeave(int dev) {
  pthread_mutex_lock(&strictLock);
  --strictDepth[dev & 1];
  pthread_mutex_unlock(&strictLock);
}

/* A data call on c: c's owner thread (the first to make one) only, on a live endpoint. */
static ncclResult_t strictOwn(struct comm* c, const char* call) {
  if (!c->owned) {
    c->owned = 1;
    c->owner = pthread_self();
  } else if (!pthread_equal(c->owner, pthread_self())) {
    char text[160];
    snprintf(text, sizeof text, "%s on a %s comm from a second thread", call, c->isSend ? "send" : "recv");
    strictDie(text);
  }
  if (strictDead[c->dev & 1]) {
    LOG(NCCL_LOG_WARN, "loopback net (strict): %s on a request with inactive endpoint (device %d)", call, c->dev);
    return ncclSystemError;
  }
  return ncclSuccess;
}

static ncclResult_t strictListen(void* ctx, int dev, void* handle, void** listenComm) {
  strictEnter(dev, "listen");
  const ncclResult_t r = v11Listen(ctx, dev, handle, listenComm);
  strictLeave(dev);
  return r;
}
static ncclResult_t strictConnect(void* ctx, int dev, void* handle, void** sendComm, ncclNetDeviceHandle_v11_t** dc) {
  strictEnter(dev, "connect");
  const ncclResult_t r = v11Connect(ctx, dev, handle, sendComm, dc);
  strictLeave(dev);
  return r;
}
static ncclResult_t strictAccept(void* listenComm, void** recvComm, ncclNetDeviceHandle_v11_t** dc) {
  const int dev = ((struct listenComm*)listenComm)->dev;
  strictEnter(dev, "accept");
  const ncclResult_t r = v11Accept(listenComm, recvComm, dc);
  strictLeave(dev);
  return r;
}
static ncclResult_t strictRegMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  const int dev = ((struct comm*)comm)->dev;
  strictEnter(dev, "regMr");
  const ncclResult_t r = loopRegMr(comm, data, size, type, mhandle);
  strictLeave(dev);
  return r;
}
static ncclResult_t strictIsend(void* comm, void* data, size_t size, int tag, void* mh, void* ph, void** request) {
  struct comm* c = (struct comm*)comm;
  ncclResult_t r = strictOwn(c, "isend");
  if (r != ncclSuccess) return r;
  strictEnter(c->dev, "isend");
  r = v11Isend(comm, data, size, tag, mh, ph, request);
  strictLeave(c->dev);
  return r;
}
static ncclResult_t strictIrecv(void* comm, int n, void** data, size_t* sizes, int* tags, void** mhs, void** phs,
                                void** request) {
  struct comm* c = (struct comm*)comm;
  ncclResult_t r = strictOwn(c, "irecv");
  if (r != ncclSuccess) return r;
  strictEnter(c->dev, "irecv");
  r = v11Irecv(comm, n, data, sizes, tags, mhs, phs, request);
  strictLeave(c->dev);
  return r;
}
static ncclResult_t strictTest(void* request, int* done, int* sizes) {
  struct request* q = (struct request*)request;
  if (q == NULL || !q->used || q->owner == NULL) return ncclInternalError;
  struct comm* c = q->owner;
  ncclResult_t r = strictOwn(c, "test");
  if (r != ncclSuccess) return r;
  strictEnter(c->dev, "test");
  r = loopTest(request, done, sizes);
  strictLeave(c->dev);
  return r;
}
static ncclResult_t strictClose(void* comm) {
  struct comm* c = (struct comm*)comm;
  if (c == NULL) return ncclSuccess;
  if (c->owned && !pthread_equal(c->owner, pthread_self())) strictDie(c->isSend ? "closeSend from a second thread" : "closeRecv from a second thread");
  int inFlight = 0;
  for (int i = 0; i < MAX_REQUESTS; ++i) inFlight += c->reqs[i].used;
  const int dev = c->dev;
  if (inFlight > 0) {
    LOG(NCCL_LOG_WARN, "loopback net (strict): closing a %s comm with %d request(s) in flight; invalidating the "
        "endpoint of device %d", c->isSend ? "send" : "recv", inFlight, dev);
    strictDead[dev & 1] = 1;
    struct linger reset = {1, 0}; /* the peer sees its connection reset */
    setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
  }
  strictEnter(dev, "close");
  const ncclResult_t r = closeComm(comm);
  strictLeave(dev);
  return r;
}
