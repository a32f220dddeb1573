/*
 * A profiler plugin for Braid's tests: prints every call it gets on stdout, one line each,
 * for test/integration/plugin_test.cc to check the events, their parents and their order:
 *   prof r<rank> init v<version> ...
 *   prof r<rank> start <id> <Type> parent=<id|-> [group=<id|->] <fields>
 *   prof r<rank> state <id> <State> [pTimer=<ns>]
 *   prof r<rank> stop <id> <Type>
 *   prof finalize <contexts left>
 * ProxyOp starts print pid, channel, peer, nSteps, chunk and send; ProxyStep starts their step;
 * a ProxyStep state its bytes (size=); ProxyCtrl states print by name (Idle, Active, Sleep,
 * Wakeup, Append, AppendEnd with appended=); NetPlugin starts their id and whether data is set,
 * NetPluginUpdate states by name. Every line is flushed at once, so that the lines of
 * ranks that are processes sharing one pipe never mix.
 * Ids count from 1 per context (per communicator); a parent that is not a handle this plugin
 * returned prints as "bad". The mask comes from NCCL_PROFILE_EVENT_MASK (default: every type).
 * Its declarations come from include/nccl_profiler.h, whose layouts are checked below against
 * NVIDIA's (x86-64).
 *
 * Built several ways: default exports ncclProfiler_v5; -DPROFILER_V4_ONLY, -DPROFILER_V3_ONLY and
 * -DPROFILER_V1_ONLY only that version;
 * -DPROFILER_NO_SYMBOL none; -DPROFILER_INIT_FAILS a v5 whose init fails;
 * -DPROFILER_BAD_ANSWERS a v5 that asks for every bit (-1), returns NULL for Coll events and
 * an error for KernelCh events.
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl_profiler.h"

#if defined(PROFILER_NO_SYMBOL)

/* A library that exports no ncclProfiler_vN. */
int braidTestNotAProfiler = 1;

#else

/* ---- layouts (offsets in bytes on x86-64, as NVIDIA's headers lay them out) --------------- */
#define CHECK_AT(type, member, offset) _Static_assert(offsetof(type, member) == (offset), #type "." #member)
CHECK_AT(ncclProfilerEventDescr_v5_t, parentObj, 8);
CHECK_AT(ncclProfilerEventDescr_v5_t, rank, 16);
CHECK_AT(ncclProfilerEventDescr_v5_t, groupApi.groupDepth, 28);
CHECK_AT(ncclProfilerEventDescr_v5_t, collApi.root, 48);
CHECK_AT(ncclProfilerEventDescr_v5_t, collApi.graphCaptured, 64);
CHECK_AT(ncclProfilerEventDescr_v5_t, p2pApi.graphCaptured, 56);
CHECK_AT(ncclProfilerEventDescr_v5_t, coll.seqNumber, 24);
CHECK_AT(ncclProfilerEventDescr_v5_t, coll.root, 64);
CHECK_AT(ncclProfilerEventDescr_v5_t, coll.nChannels, 80);
CHECK_AT(ncclProfilerEventDescr_v5_t, coll.nWarps, 81);
CHECK_AT(ncclProfilerEventDescr_v5_t, coll.algo, 88);
CHECK_AT(ncclProfilerEventDescr_v5_t, coll.parentGroup, 104);
CHECK_AT(ncclProfilerEventDescr_v5_t, p2p.peer, 56);
CHECK_AT(ncclProfilerEventDescr_v5_t, p2p.nChannels, 60);
CHECK_AT(ncclProfilerEventDescr_v5_t, p2p.parentGroup, 64);
CHECK_AT(ncclProfilerEventDescr_v5_t, proxyOp.channelId, 28);
CHECK_AT(ncclProfilerEventDescr_v5_t, proxyOp.isSend, 44);
CHECK_AT(ncclProfilerEventDescr_v5_t, kernelCh.pTimer, 32);
CHECK_AT(ncclProfilerEventDescr_v5_t, netPlugin.data, 32);
_Static_assert(sizeof(ncclProfilerEventDescr_v5_t) == 112, "v5 descriptor size");
_Static_assert(sizeof(ncclProfilerEventStateArgs_v5_t) == 8, "v5 state args size");
CHECK_AT(ncclProfilerEventDescr_v4_t, coll.proto, 96);
CHECK_AT(ncclProfilerEventDescr_v4_t, p2p.nChannels, 60);
CHECK_AT(ncclProfilerEventDescr_v4_t, kernelCh.pTimer, 32);
_Static_assert(sizeof(ncclProfilerEventDescr_v4_t) == 104, "v4 descriptor size");
CHECK_AT(ncclProfilerEventDescr_v3_t, coll.seqNumber, 40);
CHECK_AT(ncclProfilerEventDescr_v3_t, coll.nMaxChannels, 96);
CHECK_AT(ncclProfilerEventDescr_v3_t, coll.proto, 112);
CHECK_AT(ncclProfilerEventDescr_v3_t, p2p.peer, 72);
_Static_assert(sizeof(ncclProfilerEventDescr_v3_t) == 120, "v3 descriptor size");
CHECK_AT(ncclProfilerEventDescr_v2_t, coll.trafficBytes, 96);
CHECK_AT(ncclProfilerEventDescr_v2_t, coll.proto, 120);
_Static_assert(sizeof(ncclProfilerEventDescr_v2_t) == 128, "v2 descriptor size");
CHECK_AT(ncclProfilerEventDescr_v1_t, coll.func, 48);
CHECK_AT(ncclProfilerEventDescr_v1_t, coll.datatype, 84);
CHECK_AT(ncclProfilerEventDescr_v1_t, coll.op, 88);
CHECK_AT(ncclProfilerEventDescr_v1_t, coll.nMaxChannels, 104);
CHECK_AT(ncclProfilerEventDescr_v1_t, coll.proto, 107);
CHECK_AT(ncclProfilerEventDescr_v1_t, coll.isNvls, 112);
CHECK_AT(ncclProfilerEventDescr_v1_t, p2p.datatype, 56);
CHECK_AT(ncclProfilerEventDescr_v1_t, p2p.peer, 72);
_Static_assert(sizeof(ncclProfilerEventDescr_v1_t) == 120, "v1 descriptor size");
_Static_assert(sizeof(ncclProfilerEventStateArgs_v1_t) == 16, "v1 state args size");
CHECK_AT(ncclProfiler_v5_t, finalize, 40);
CHECK_AT(ncclProfiler_v1_t, recordEventState, 32);
_Static_assert(ncclProfileKernelLaunch == 2048 && ncclProfilerGroupEndApiStart == 24, "values");

/* ---- events ----------------------------------------------------------------------------------- */

struct context {
  int rank; /* -1 until known (v1 init does not say) */
  int nextId;
};

struct event {
  int id;
  int type;
  int rank;
};

#define MAX_EVENTS 65536
static struct event events[MAX_EVENTS];
static int nEvents; /* (atomic) */
static int contexts; /* (atomic) */

static struct event* newEvent(struct context* ctx, int type, int rank) {
  int i = __atomic_fetch_add(&nEvents, 1, __ATOMIC_RELAXED);
  if (i >= MAX_EVENTS) return NULL;
  struct event* e = &events[i];
  e->id = __atomic_add_fetch(&ctx->nextId, 1, __ATOMIC_RELAXED);
  e->type = type;
  e->rank = rank;
  return e;
}

/* Whole lines, each in one write: several processes may share the pipe. */
#define LINE(...) (printf(__VA_ARGS__), fflush(stdout))

/* The ProxyOp and ProxyStep lines (every version has the same fields); 0 for another type. */
#define PRINT_PROXY(d, e, parent)                                                                                    \
  ((d)->type == ncclProfileProxyOp                                                                                   \
       ? (LINE("prof r%d start %d ProxyOp parent=%s pid=%d channel=%d peer=%d nSteps=%d chunk=%d send=%d\n",         \
               (d)->rank, (e)->id, idOf((d)->parentObj, parent), (int)(d)->proxyOp.pid, (d)->proxyOp.channelId,     \
               (d)->proxyOp.peer, (d)->proxyOp.nSteps, (d)->proxyOp.chunkSize, (d)->proxyOp.isSend),               \
          1)                                                                                                         \
   : (d)->type == ncclProfileProxyStep                                                                               \
       ? (LINE("prof r%d start %d ProxyStep parent=%s step=%d\n", (d)->rank, (e)->id, idOf((d)->parentObj, parent),  \
               (d)->proxyStep.step),                                                                                 \
          1)                                                                                                         \
       : 0)

/* A parent's id as text: "-" for none, "bad" for a pointer this plugin never returned. */
static const char* idOf(const void* handle, char* text) {
  const struct event* e = (const struct event*)handle;
  if (e == NULL) return "-";
  if (e < events || e >= events + MAX_EVENTS) return "bad";
  snprintf(text, 16, "%d", e->id);
  return text;
}

/* The data of a built-in transport's NetPlugin event (NCCL's IB and socket descriptors),
 * field by field; empty for another id. (Unused in the v1-only build, whose descriptors have none.) */
__attribute__((unused)) static void netDetail(uint64_t id, const void* data, char* out, size_t size) {
  out[0] = '\0';
  if (data == NULL) return;
  if (id == (NCCL_PROFILER_NET_TYPE_IB | NCCL_PROFILER_NET_IB_VER)) {
    const ncclProfilerNetIbDescr_v1_t* ib = (const ncclProfilerNetIbDescr_v1_t*)data;
    snprintf(out, size, " ibtype=%d device=%d wrid=%" PRIu64 " opcode=%d qp=%d length=%zu", ib->type, ib->qp.device,
             ib->qp.wr_id, ib->qp.opcode, ib->qp.qpNum, ib->qp.length);
  } else if (id == (NCCL_PROFILER_NET_TYPE_SOCK | NCCL_PROFILER_NET_SOCKET_VER)) {
    const ncclProfilerNetSockDescr_v1_t* sk = (const ncclProfilerNetSockDescr_v1_t*)data;
    snprintf(out, size, " socktype=%d fd=%d op=%d length=%zu", sk->type, sk->sock.fd, sk->sock.op, sk->sock.length);
  }
}

static const char* typeName(int type) {
  switch (type) {
    case ncclProfileGroup: return "Group";
    case ncclProfileColl: return "Coll";
    case ncclProfileP2p: return "P2p";
    case ncclProfileProxyOp: return "ProxyOp";
    case ncclProfileProxyStep: return "ProxyStep";
    case ncclProfileProxyCtrl: return "ProxyCtrl";
    case ncclProfileKernelCh: return "KernelCh";
    case ncclProfileNetPlugin: return "NetPlugin";
    case ncclProfileGroupApi: return "GroupApi";
    case ncclProfileCollApi: return "CollApi";
    case ncclProfileP2pApi: return "P2pApi";
    case ncclProfileKernelLaunch: return "KernelLaunch";
    default: return "Unknown";
  }
}

static int maskFromEnv(void) {
  const char* text = getenv("NCCL_PROFILE_EVENT_MASK");
  return text != NULL ? (int)strtol(text, NULL, 0) : 0xfff;
}

static ncclResult_t stopEvent(void* handle) {
  struct event* e = (struct event*)handle;
  if (e == NULL || e < events || e >= events + MAX_EVENTS) {
    LINE("prof stop of a bad handle %p\n", handle);
    return ncclSuccess;
  }
  LINE("prof r%d stop %d %s\n", e->rank, e->id, typeName(e->type));
  return ncclSuccess;
}

static ncclResult_t recordState(void* handle, ncclProfilerEventState_t state, uint64_t pTimer, int hasTimer);

/* A ProxyStep state with its bytes; 0 for another state. */
static int recordStepState(void* handle, ncclProfilerEventState_t state, size_t bytes) {
  const char* name = state == ncclProfilerProxyStepSendGPUWait     ? "SendGPUWait"
                     : state == ncclProfilerProxyStepSendPeerWait_v4 ? "SendPeerWait"
                     : state == ncclProfilerProxyStepSendWait        ? "SendWait"
                     : state == ncclProfilerProxyStepRecvWait        ? "RecvWait"
                     : state == ncclProfilerProxyStepRecvFlushWait   ? "RecvFlushWait"
                     : state == ncclProfilerProxyStepRecvGPUWait     ? "RecvGPUWait"
                                                                     : NULL;
  if (name == NULL) return 0;
  struct event* e = (struct event*)handle;
  if (e == NULL || e < events || e >= events + MAX_EVENTS) {
    LINE("prof state of a bad handle %p\n", handle);
  } else {
    LINE("prof r%d state %d %s size=%zu\n", e->rank, e->id, name, bytes);
  }
  return 1;
}

/* A ProxyCtrl state (with AppendEnd's appended count), or NetPluginUpdate; 0 for another state. */
static int recordProxyCtrlOrNetState(void* handle, ncclProfilerEventState_t state, int appended) {
  const char* name = state == ncclProfilerProxyCtrlIdle        ? "Idle"
                     : state == ncclProfilerProxyCtrlActive    ? "Active"
                     : state == ncclProfilerProxyCtrlSleep     ? "Sleep"
                     : state == ncclProfilerProxyCtrlWakeup    ? "Wakeup"
                     : state == ncclProfilerProxyCtrlAppend    ? "Append"
                     : state == ncclProfilerProxyCtrlAppendEnd ? "AppendEnd"
                     : state == ncclProfilerNetPluginUpdate    ? "NetPluginUpdate"
                                                               : NULL;
  if (name == NULL) return 0;
  struct event* e = (struct event*)handle;
  if (e == NULL || e < events || e >= events + MAX_EVENTS) {
    LINE("prof state of a bad handle %p\n", handle);
  } else if (state == ncclProfilerProxyCtrlAppendEnd) {
    LINE("prof r%d state %d %s appended=%d\n", e->rank, e->id, name, appended);
  } else {
    LINE("prof r%d state %d %s\n", e->rank, e->id, name);
  }
  return 1;
}

static ncclResult_t recordState(void* handle, ncclProfilerEventState_t state, uint64_t pTimer, int hasTimer) {
  struct event* e = (struct event*)handle;
  if (e == NULL || e < events || e >= events + MAX_EVENTS) {
    LINE("prof state of a bad handle %p\n", handle);
    return ncclSuccess;
  }
  const char* name = state == ncclProfilerKernelChStop        ? "KernelChStop"
                     : state == ncclProfilerGroupStartApiStop ? "GroupStartApiStop"
                     : state == ncclProfilerGroupEndApiStart  ? "GroupEndApiStart"
                                                              : "Other";
  if (hasTimer) {
    LINE("prof r%d state %d %s pTimer=%" PRIu64 "\n", e->rank, e->id, name, pTimer);
  } else {
    LINE("prof r%d state %d %s\n", e->rank, e->id, name);
  }
  return ncclSuccess;
}

static ncclResult_t finalize(void* context) {
  free(context);
  int left = __atomic_sub_fetch(&contexts, 1, __ATOMIC_RELAXED);
  LINE("prof finalize %d\n", left);
  return ncclSuccess;
}

#if defined(PROFILER_V1_ONLY)

static ncclResult_t v1Init(void** context, int* eActivationMask) {
  struct context* ctx = calloc(1, sizeof *ctx);
  ctx->rank = -1;
  *context = ctx;
  *eActivationMask = maskFromEnv();
  __atomic_add_fetch(&contexts, 1, __ATOMIC_RELAXED);
  LINE("prof init v1\n");
  return ncclSuccess;
}

static ncclResult_t v1StartEvent(void* context, void** handle, ncclProfilerEventDescr_v1_t* d) {
  struct event* e = newEvent((struct context*)context, d->type, d->rank);
  *handle = e;
  if (e == NULL) return ncclSuccess;
  char parent[16];
  if (d->type == ncclProfileColl) {
    LINE("prof r%d start %d Coll parent=%s func=%d dtype=%d count=%zu seq=%" PRIu64 " algo=%d proto=%d nch=%d "
           "name=%s hash=%" PRIx64 "\n", d->rank, e->id, idOf(d->parentObj, parent), d->coll.func, d->coll.datatype,
           d->coll.count, d->coll.seqNumber, d->coll.algo, d->coll.proto, d->coll.nMaxChannels,
           d->coll.name != NULL ? d->coll.name : "(null)", d->coll.commHash);
  } else if (d->type == ncclProfileP2p) {
    LINE("prof r%d start %d P2p parent=%s func=%d dtype=%d count=%zu peer=%d\n", d->rank, e->id,
           idOf(d->parentObj, parent), d->p2p.func, d->p2p.datatype, d->p2p.count, d->p2p.peer);
  } else if (!PRINT_PROXY(d, e, parent)) {
    LINE("prof r%d start %d %s parent=%s\n", d->rank, e->id, typeName(d->type), idOf(d->parentObj, parent));
  }
  return ncclSuccess;
}

static ncclResult_t v1RecordEventState(void* handle, ncclProfilerEventState_v1_t state,
                                       ncclProfilerEventStateArgs_v1_t* args) {
  if (recordStepState(handle, state, args != NULL ? args->proxyOp.transSize : 0)) return ncclSuccess;
  if (recordProxyCtrlOrNetState(handle, state, args != NULL ? args->proxyCtrl.appendedProxyOps : -1)) return ncclSuccess;
  return recordState(handle, state, 0, 0);
}

const ncclProfiler_v1_t ncclProfiler_v1 = {
    .name = "record-v1",
    .init = v1Init,
    .startEvent = v1StartEvent,
    .stopEvent = stopEvent,
    .recordEventState = v1RecordEventState,
    .finalize = finalize,
};

#elif defined(PROFILER_V4_ONLY) || defined(PROFILER_V3_ONLY)

#if defined(PROFILER_V4_ONLY)
#define OLD_VERSION 4
typedef ncclProfilerEventDescr_v4_t OldDescr;
typedef ncclProfilerEventStateArgs_v4_t OldArgs;
#else
#define OLD_VERSION 3
typedef ncclProfilerEventDescr_v3_t OldDescr;
typedef ncclProfilerEventStateArgs_v3_t OldArgs;
#endif

#if OLD_VERSION == 4
static ncclResult_t oldInit(void** context, int* eActivationMask, const char* commName, uint64_t commHash, int nNodes,
                            int nranks, int rank, ncclDebugLogger_t logfn) {
  (void)logfn;
  LINE("prof r%d init v4 comm=%" PRIx64 " name=%s nNodes=%d nranks=%d\n", rank, commHash,
         commName != NULL ? commName : "(null)", nNodes, nranks);
#else
static ncclResult_t oldInit(void** context, int* eActivationMask) {
  LINE("prof init v3\n");
  const int rank = -1;
#endif
  struct context* ctx = calloc(1, sizeof *ctx);
  ctx->rank = rank;
  *context = ctx;
  *eActivationMask = maskFromEnv();
  __atomic_add_fetch(&contexts, 1, __ATOMIC_RELAXED);
  return ncclSuccess;
}

static ncclResult_t oldStartEvent(void* context, void** handle, OldDescr* d) {
  struct event* e = newEvent((struct context*)context, d->type, d->rank);
  *handle = e;
  if (e == NULL) return ncclSuccess;
  char parent[16];
  if (d->type == ncclProfileColl) {
#if OLD_VERSION == 4
    LINE("prof r%d start %d Coll parent=%s func=%s count=%zu dtype=%s seq=%" PRIu64 " algo=%s proto=%s nch=%d\n",
           d->rank, e->id, idOf(d->parentObj, parent), d->coll.func, d->coll.count, d->coll.datatype,
           d->coll.seqNumber, d->coll.algo, d->coll.proto, d->coll.nChannels);
#else
    LINE("prof r%d start %d Coll parent=%s func=%s count=%zu dtype=%s seq=%" PRIu64 " algo=%s proto=%s nch=%d "
           "hash=%" PRIx64 "\n", d->rank, e->id, idOf(d->parentObj, parent), d->coll.func, d->coll.count,
           d->coll.datatype, d->coll.seqNumber, d->coll.algo, d->coll.proto, d->coll.nMaxChannels, d->coll.commHash);
#endif
  } else if (d->type == ncclProfileP2p) {
    LINE("prof r%d start %d P2p parent=%s func=%s count=%zu peer=%d\n", d->rank, e->id, idOf(d->parentObj, parent),
           d->p2p.func, d->p2p.count, d->p2p.peer);
  } else if (d->type == ncclProfileKernelCh) {
#if OLD_VERSION == 4
    LINE("prof r%d start %d KernelCh parent=%s channel=%d pTimer=%" PRIu64 "\n", d->rank, e->id,
           idOf(d->parentObj, parent), d->kernelCh.channelId, d->kernelCh.pTimer);
#else
    LINE("prof r%d start %d KernelCh parent=%s channel=%d\n", d->rank, e->id, idOf(d->parentObj, parent),
           d->kernelCh.channelId);
#endif
  } else if (d->type == ncclProfileNetPlugin) {
    char detail[160];
    const uint64_t id = (uint64_t)d->netPlugin.id;
    netDetail(id, d->netPlugin.data, detail, sizeof detail);
    LINE("prof r%d start %d NetPlugin parent=%s id=%#" PRIx64 " data=%s%s\n", d->rank, e->id,
           idOf(d->parentObj, parent), id, d->netPlugin.data != NULL ? "set" : "null", detail);
  } else if (!PRINT_PROXY(d, e, parent)) {
    LINE("prof r%d start %d %s parent=%s\n", d->rank, e->id, typeName(d->type), idOf(d->parentObj, parent));
  }
  return ncclSuccess;
}

static ncclResult_t oldRecordEventState(void* handle, ncclProfilerEventState_t state, OldArgs* args) {
#if OLD_VERSION == 4
  if (state == ncclProfilerKernelChStop) return recordState(handle, state, args != NULL ? args->kernelCh.pTimer : 0, 1);
  if (recordStepState(handle, state, args != NULL ? args->proxyStep.transSize : 0)) return ncclSuccess;
#else
  if (recordStepState(handle, state, args != NULL ? args->proxyOp.transSize : 0)) return ncclSuccess;
#endif
  if (recordProxyCtrlOrNetState(handle, state, args != NULL ? args->proxyCtrl.appendedProxyOps : -1)) return ncclSuccess;
  return recordState(handle, state, 0, 0);
}

#if OLD_VERSION == 4
const ncclProfiler_v4_t ncclProfiler_v4 = {
    .name = "record-v4",
#else
const ncclProfiler_v3_t ncclProfiler_v3 = {
    .name = "record-v3",
#endif
    .init = oldInit,
    .startEvent = oldStartEvent,
    .stopEvent = stopEvent,
    .recordEventState = oldRecordEventState,
    .finalize = finalize,
};

#else /* v5 */

static ncclResult_t v5Init(void** context, uint64_t commId, int* eActivationMask, const char* commName, int nNodes,
                           int nranks, int rank, ncclDebugLogger_t logfn) {
  logfn(NCCL_LOG_INFO, NCCL_INIT, __FILE__, __LINE__, "test profiler: init rank %d", rank);
#if defined(PROFILER_INIT_FAILS)
  (void)context, (void)commId, (void)eActivationMask, (void)commName, (void)nNodes, (void)nranks;
  (void)maskFromEnv;
  return ncclInternalError;
#else
  struct context* ctx = calloc(1, sizeof *ctx);
  ctx->rank = rank;
  *context = ctx;
#if defined(PROFILER_BAD_ANSWERS)
  *eActivationMask = -1;
  (void)maskFromEnv;
#else
  *eActivationMask = maskFromEnv();
#endif
  __atomic_add_fetch(&contexts, 1, __ATOMIC_RELAXED);
  LINE("prof r%d init v5 comm=%" PRIx64 " name=%s nNodes=%d nranks=%d mask=%#x\n", rank, commId,
         commName != NULL ? commName : "(null)", nNodes, nranks, (unsigned)*eActivationMask);
  return ncclSuccess;
#endif
}

static ncclResult_t v5StartEvent(void* context, void** handle, ncclProfilerEventDescr_v5_t* d) {
  struct context* ctx = (struct context*)context;
#if defined(PROFILER_BAD_ANSWERS)
  if (d->type == ncclProfileColl) return ncclSuccess; /* *handle left NULL */
  if (d->type == ncclProfileKernelCh) {
    *handle = (void*)0x1; /* an error: Braid must not use it */
    return ncclInternalError;
  }
#endif
  if (d->rank != ctx->rank) LINE("prof r%d event of rank %d\n", ctx->rank, d->rank);
  struct event* e = newEvent(ctx, (int)d->type, d->rank);
  *handle = e;
  if (e == NULL) return ncclSuccess;
  char parent[16], group[16];
  switch (d->type) {
    case ncclProfileGroupApi:
      LINE("prof r%d start %d GroupApi parent=%s depth=%d captured=%d\n", d->rank, e->id,
             idOf(d->parentObj, parent), d->groupApi.groupDepth, (int)d->groupApi.graphCaptured);
      break;
    case ncclProfileCollApi:
      LINE("prof r%d start %d CollApi parent=%s func=%s count=%zu dtype=%s root=%d captured=%d\n", d->rank, e->id,
             idOf(d->parentObj, parent), d->collApi.func, d->collApi.count, d->collApi.datatype, d->collApi.root,
             (int)d->collApi.graphCaptured);
      break;
    case ncclProfileP2pApi:
      LINE("prof r%d start %d P2pApi parent=%s func=%s count=%zu dtype=%s captured=%d\n", d->rank, e->id,
             idOf(d->parentObj, parent), d->p2pApi.func, d->p2pApi.count, d->p2pApi.datatype,
             (int)d->p2pApi.graphCaptured);
      break;
    case ncclProfileColl:
      LINE("prof r%d start %d Coll parent=%s group=%s func=%s count=%zu dtype=%s root=%d seq=%" PRIu64
             " algo=%s proto=%s nch=%d\n", d->rank, e->id, idOf(d->parentObj, parent),
             idOf(d->coll.parentGroup, group), d->coll.func, d->coll.count, d->coll.datatype, d->coll.root,
             d->coll.seqNumber, d->coll.algo, d->coll.proto, d->coll.nChannels);
      break;
    case ncclProfileP2p:
      LINE("prof r%d start %d P2p parent=%s group=%s func=%s count=%zu dtype=%s peer=%d nch=%d\n", d->rank, e->id,
             idOf(d->parentObj, parent), idOf(d->p2p.parentGroup, group), d->p2p.func, d->p2p.count, d->p2p.datatype,
             d->p2p.peer, d->p2p.nChannels);
      break;
    case ncclProfileKernelCh:
      LINE("prof r%d start %d KernelCh parent=%s channel=%d pTimer=%" PRIu64 "\n", d->rank, e->id,
             idOf(d->parentObj, parent), d->kernelCh.channelId, d->kernelCh.pTimer);
      break;
    case ncclProfileNetPlugin: {
      char detail[160];
      netDetail((uint64_t)d->netPlugin.id, d->netPlugin.data, detail, sizeof detail);
      LINE("prof r%d start %d NetPlugin parent=%s id=%#" PRIx64 " data=%s%s\n", d->rank, e->id,
             idOf(d->parentObj, parent), (uint64_t)d->netPlugin.id, d->netPlugin.data != NULL ? "set" : "null", detail);
      break;
    }
    default:
      if (PRINT_PROXY(d, e, parent)) break;
      LINE("prof r%d start %d %s parent=%s\n", d->rank, e->id, typeName((int)d->type), idOf(d->parentObj, parent));
      break;
  }
  return ncclSuccess;
}

static ncclResult_t v5RecordEventState(void* handle, ncclProfilerEventState_v5_t state,
                                       ncclProfilerEventStateArgs_v5_t* args) {
  if (state == ncclProfilerKernelChStop) return recordState(handle, state, args != NULL ? args->kernelCh.pTimer : 0, 1);
  if (recordStepState(handle, state, args != NULL ? args->proxyStep.transSize : 0)) return ncclSuccess;
  if (recordProxyCtrlOrNetState(handle, state, args != NULL ? args->proxyCtrl.appendedProxyOps : -1)) return ncclSuccess;
  return recordState(handle, state, 0, 0);
}

const ncclProfiler_v5_t ncclProfiler_v5 = {
#if defined(PROFILER_INIT_FAILS)
    .name = "record-initfails",
#elif defined(PROFILER_BAD_ANSWERS)
    .name = "record-bad",
#else
    .name = "record",
#endif
    .init = v5Init,
    .startEvent = v5StartEvent,
    .stopEvent = stopEvent,
    .recordEventState = v5RecordEventState,
    .finalize = finalize,
};

#endif

#endif /* PROFILER_NO_SYMBOL */
