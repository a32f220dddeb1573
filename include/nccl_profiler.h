/*
 * Braid: the profiler plugin interface of NCCL 2.28.9, versions 1 to 5, ABI-identical to
 * NVIDIA's (the event types, the states and their values, and each version's descriptor,
 * state arguments and function table).
 *
 * A profiler plugin is a shared library exporting a struct named ncclProfiler_vN (N = 5, 4, 3,
 * 2 or 1; the newest one found is used). NCCL_PROFILER_PLUGIN names it (a path, or a name X
 * found as libnccl-profiler-X.so or X); unset, libnccl-profiler.so is looked for, then the same
 * symbol in the net plugin's library; "none" disables it.
 *
 * Each communicator calls init once; the plugin answers with *eActivationMask, the event types
 * it wants (ncclProfile* bits; the example plugins read NCCL_PROFILE_EVENT_MASK for it). The
 * library then calls startEvent for each event, with a descriptor whose parentObj is the handle
 * the parent event's startEvent returned, recordEventState for the state changes of the events
 * that have states, and stopEvent once per handle; finalize when the communicator is destroyed
 * or aborted. A handle left NULL by startEvent gets no further call. Only init's error counts:
 * it disables the plugin for that communicator.
 *
 * Version 5's hierarchy: Group API > Coll API > Coll > (ProxyOp > ProxyStep > NetPlugin,
 * KernelCh); Group API > P2P API > P2P > (the same); Group API > Kernel launch. The Group
 * event has no parent, and Coll and P2P name it in their parentGroup (versions 1 to 4 see it
 * as their parent and get no API or kernel launch events). ProxyCtrl events (the proxy
 * thread's states) have no parent; NetPlugin events are started by a net plugin through the
 * profiler callback it got at init (nccl_common.h), under the ProxyStep its call's phandle
 * names (versions 3 to 5).
 */
#ifndef NCCL_PROFILER_H_
#define NCCL_PROFILER_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "nccl.h"
#include "nccl_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Event types: the descriptor's type, and the bits of the activation mask. */
enum {
  ncclProfileGroup = (1 << 0),        /* a group of operations as launched */
  ncclProfileColl = (1 << 1),         /* one collective as launched */
  ncclProfileP2p = (1 << 2),          /* one send or receive as launched */
  ncclProfileProxyOp = (1 << 3),      /* the proxy's part of an operation on one channel */
  ncclProfileProxyStep = (1 << 4),    /* one network transfer of a ProxyOp */
  ncclProfileProxyCtrl = (1 << 5),    /* the proxy thread's own activity */
  ncclProfileKernelCh = (1 << 6),     /* an operation's work on one channel (kernel) */
  ncclProfileNetPlugin = (1 << 7),    /* events defined by the net plugin */
  ncclProfileGroupApi = (1 << 8),     /* v5: ncclGroupStart..ncclGroupEnd (or an implicit group) */
  ncclProfileCollApi = (1 << 9),      /* v5: a collective API call */
  ncclProfileP2pApi = (1 << 10),      /* v5: a send/receive API call */
  ncclProfileKernelLaunch = (1 << 11) /* v5: a kernel launch */
};

/* States given to recordEventState. */
typedef enum {
  ncclProfilerProxyOpSendPosted = 0, /* ProxyOp states: deprecated since v4 */
  ncclProfilerProxyOpSendRemFifoWait = 1,
  ncclProfilerProxyOpSendTransmitted = 2,
  ncclProfilerProxyOpSendDone = 3,
  ncclProfilerProxyOpRecvPosted = 4,
  ncclProfilerProxyOpRecvReceived = 5,
  ncclProfilerProxyOpRecvTransmitted = 6,
  ncclProfilerProxyOpRecvDone = 7,
  ncclProfilerProxyOpInProgress_v4 = 19,

  ncclProfilerProxyStepSendGPUWait = 8, /* ProxyStep states */
  ncclProfilerProxyStepSendPeerWait_v4 = 20,
  ncclProfilerProxyStepSendWait = 9,
  ncclProfilerProxyStepRecvWait = 10,
  ncclProfilerProxyStepRecvFlushWait = 11,
  ncclProfilerProxyStepRecvGPUWait = 12,

  ncclProfilerProxyCtrlIdle = 13, /* ProxyCtrl states */
  ncclProfilerProxyCtrlActive = 14,
  ncclProfilerProxyCtrlSleep = 15,
  ncclProfilerProxyCtrlWakeup = 16,
  ncclProfilerProxyCtrlAppend = 17,
  ncclProfilerProxyCtrlAppendEnd = 18,

  ncclProfilerNetPluginUpdate = 21, /* NetPlugin: the net plugin's event changed */

  ncclProfilerKernelChStop = 22, /* KernelCh: the channel's work ended (with its timestamp) */

  ncclProfilerGroupStartApiStop = 23, /* Group API: ncclGroupStart returned */
  ncclProfilerGroupEndApiStart = 24   /* Group API: ncclGroupEnd was called */
} ncclProfilerEventState_t;

typedef ncclProfilerEventState_t ncclProfilerEventState_v1_t;
typedef ncclProfilerEventState_t ncclProfilerEventState_v2_t;
typedef ncclProfilerEventState_t ncclProfilerEventState_v3_t;
typedef ncclProfilerEventState_t ncclProfilerEventState_v4_t;
typedef ncclProfilerEventState_t ncclProfilerEventState_v5_t;

/* Net plugin event ids (NetPlugin descriptors): 16 bits of version, then 16 bits of type. */
#define NCCL_PROFILER_NET_VER_BITS (16)
#define NCCL_PROFILER_NET_VER_MASK (~0U >> NCCL_PROFILER_NET_VER_BITS)
#define NCCL_PROFILER_NET_TYPE_MASK (~0U << NCCL_PROFILER_NET_VER_BITS)
typedef enum {
  NCCL_PROFILER_NET_TYPE_IB = (1U << NCCL_PROFILER_NET_VER_BITS),
  NCCL_PROFILER_NET_TYPE_SOCK = (2U << NCCL_PROFILER_NET_VER_BITS)
} ncclProfilerNetType;

/* The data of the NetPlugin events of the built-in network transports (as NCCL's own IB and
 * socket transports describe theirs): the event's id is NCCL_PROFILER_NET_TYPE_IB |
 * NCCL_PROFILER_NET_IB_VER or NCCL_PROFILER_NET_TYPE_SOCK | NCCL_PROFILER_NET_SOCKET_VER, and its
 * data points to one of these, valid until the event stops. */
#define NCCL_PROFILER_NET_IB_VER 1
enum {
  ncclProfileQp = (1 << 0) /* one work request on a queue pair */
};
typedef struct {
  uint8_t type; /* ncclProfileQp */
  union {
    struct {
      int device;     /* the network device's index */
      uint64_t wr_id; /* the work request's id */
      int opcode;     /* its ibv_wr_opcode */
      int qpNum;      /* the queue pair's number */
      size_t length;  /* bytes it moves */
    } qp;
  };
} ncclProfilerNetIbDescr_v1_t;

#define NCCL_PROFILER_NET_SOCKET_VER 1
enum {
  ncclProfileSocket = (1 << 0) /* one transfer on a socket */
};
typedef struct {
  uint8_t type; /* ncclProfileSocket */
  union {
    struct {
      int fd;        /* the socket */
      int op;        /* 0: a send, 1: a receive */
      size_t length; /* bytes it moves */
    } sock;
  };
} ncclProfilerNetSockDescr_v1_t;

/* ---- version 5 ------------------------------------------------------------------------------ */

typedef struct {
  uint64_t type;   /* one ncclProfile* bit */
  void* parentObj; /* the parent event's handle (NULL: none) */
  int rank;        /* the rank that emits it */
  union {
    struct {
      bool graphCaptured;
      int groupDepth; /* 1: an implicit group around one call; more: ncclGroupStart nesting + 1 */
    } groupApi;
    struct {
      const char* func; /* "AllReduce", ... */
      size_t count;
      const char* datatype; /* "ncclFloat32", ... */
      int root;
      void* stream;
      bool graphCaptured;
    } collApi;
    struct {
      const char* func; /* "Send" or "Recv" */
      size_t count;
      const char* datatype;
      void* stream;
      bool graphCaptured;
    } p2pApi;
    struct {
      void* stream;
    } kernelLaunch;
    struct {
      uint64_t seqNumber; /* collectives of this function on this communicator before it */
      const char* func;
      void const* sendBuff;
      void* recvBuff;
      size_t count;
      int root;
      const char* datatype;
      uint8_t nChannels;
      uint8_t nWarps;
      const char* algo; /* "RING", "TREE", ... */
      const char* proto; /* "LL", "LL128", "SIMPLE" */
      void* parentGroup; /* the Group event's handle */
    } coll;
    struct {
      const char* func;
      void* buff;
      const char* datatype;
      size_t count;
      int peer;
      uint8_t nChannels;
      void* parentGroup;
    } p2p;
    struct {
      pid_t pid; /* the process that created the operation (compare before using parentObj) */
      uint8_t channelId;
      int peer;
      int nSteps;
      int chunkSize;
      int isSend;
    } proxyOp;
    struct {
      int step;
    } proxyStep;
    struct {
      uint8_t channelId;
      uint64_t pTimer; /* when the channel's work started (ns) */
    } kernelCh;
    struct {
      int64_t id; /* the net plugin's event id (NCCL_PROFILER_NET_*) */
      void* data;
    } netPlugin;
  };
} ncclProfilerEventDescr_v5_t;

typedef union {
  struct {
    size_t transSize;
  } proxyStep;
  struct {
    int appendedProxyOps;
  } proxyCtrl;
  struct {
    void* data;
  } netPlugin;
  struct {
    uint64_t pTimer; /* with ncclProfilerKernelChStop: when the channel's work ended (ns) */
  } kernelCh;
} ncclProfilerEventStateArgs_v5_t;

typedef struct {
  const char* name;
  /* Once per communicator: commId is its hash (the same on every rank), commName the config's
   * name (may be NULL); sets *context and *eActivationMask. An error disables the plugin for it. */
  ncclResult_t (*init)(void** context, uint64_t commId, int* eActivationMask, const char* commName, int nNodes,
                       int nranks, int rank, ncclDebugLogger_t logfn);
  ncclResult_t (*startEvent)(void* context, void** eHandle, ncclProfilerEventDescr_v5_t* eDescr);
  ncclResult_t (*stopEvent)(void* eHandle);
  ncclResult_t (*recordEventState)(void* eHandle, ncclProfilerEventState_v5_t eState,
                                   ncclProfilerEventStateArgs_v5_t* eStateArgs);
  /* When the communicator is destroyed or aborted. */
  ncclResult_t (*finalize)(void* context);
} ncclProfiler_v5_t;

/* ---- version 4 ------------------------------------------------------------------------------ */

typedef struct {
  uint8_t type;
  void* parentObj; /* Coll and P2P: the Group event */
  int rank;
  union {
    struct {
      uint64_t seqNumber;
      const char* func;
      void const* sendBuff;
      void* recvBuff;
      size_t count;
      int root;
      const char* datatype;
      uint8_t nChannels;
      uint8_t nWarps;
      const char* algo;
      const char* proto;
    } coll;
    struct {
      const char* func;
      void* buff;
      const char* datatype;
      size_t count;
      int peer;
      uint8_t nChannels;
    } p2p;
    struct {
      pid_t pid;
      uint8_t channelId;
      int peer;
      int nSteps;
      int chunkSize;
      int isSend;
    } proxyOp;
    struct {
      int step;
    } proxyStep;
    struct {
      uint8_t channelId;
      uint64_t pTimer;
    } kernelCh;
    struct {
      int64_t id;
      void* data;
    } netPlugin;
  };
} ncclProfilerEventDescr_v4_t;

typedef union {
  struct {
    size_t transSize;
  } proxyStep;
  struct {
    int appendedProxyOps;
  } proxyCtrl;
  struct {
    void* data;
  } netPlugin;
  struct {
    uint64_t pTimer;
  } kernelCh;
} ncclProfilerEventStateArgs_v4_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** context, int* eActivationMask, const char* commName, uint64_t commHash, int nNodes,
                       int nranks, int rank, ncclDebugLogger_t logfn);
  ncclResult_t (*startEvent)(void* context, void** eHandle, ncclProfilerEventDescr_v4_t* eDescr);
  ncclResult_t (*stopEvent)(void* eHandle);
  ncclResult_t (*recordEventState)(void* eHandle, ncclProfilerEventState_v4_t eState,
                                   ncclProfilerEventStateArgs_v4_t* eStateArgs);
  ncclResult_t (*finalize)(void* context);
} ncclProfiler_v4_t;

/* ---- version 3 ------------------------------------------------------------------------------ */

typedef struct {
  uint8_t type;
  void* parentObj;
  int rank;
  union {
    struct {
      const char* name; /* the communicator's name */
      uint64_t commHash;
      uint64_t seqNumber;
      const char* func;
      void const* sendBuff;
      void* recvBuff;
      size_t count;
      int root;
      const char* datatype;
      uint8_t nMaxChannels;
      uint8_t nWarps;
      const char* algo;
      const char* proto;
    } coll;
    struct {
      const char* name;
      uint64_t commHash;
      const char* func;
      void* buff;
      const char* datatype;
      size_t count;
      int peer;
    } p2p;
    struct {
      pid_t pid;
      uint8_t channelId;
      int peer;
      int nSteps;
      int chunkSize;
      int isSend;
    } proxyOp;
    struct {
      int step;
    } proxyStep;
    struct {
      uint8_t channelId;
    } kernelCh;
    struct {
      int64_t id;
      void* data;
    } netPlugin;
  };
} ncclProfilerEventDescr_v3_t;

typedef union {
  struct {
    size_t transSize;
    int steps;
  } proxyOp;
  struct {
    int appendedProxyOps;
  } proxyCtrl;
} ncclProfilerEventStateArgs_v3_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** context, int* eActivationMask);
  ncclResult_t (*startEvent)(void* context, void** eHandle, ncclProfilerEventDescr_v3_t* eDescr);
  ncclResult_t (*stopEvent)(void* eHandle);
  ncclResult_t (*recordEventState)(void* eHandle, ncclProfilerEventState_v3_t eState,
                                   ncclProfilerEventStateArgs_v3_t* eStateArgs);
  ncclResult_t (*finalize)(void* context);
} ncclProfiler_v3_t;

/* ---- version 2 ------------------------------------------------------------------------------ */

typedef struct {
  uint8_t type;
  void* parentObj;
  int rank;
  union {
    struct {
      const char* name;
      uint64_t commHash;
      uint64_t seqNumber;
      const char* func;
      void const* sendBuff;
      void* recvBuff;
      size_t count;
      int root;
      const char* datatype;
      size_t trafficBytes;
      uint8_t nMaxChannels;
      uint8_t nWarps;
      const char* algo;
      const char* proto;
    } coll;
    struct {
      const char* name;
      uint64_t commHash;
      const char* func;
      void* buff;
      const char* datatype;
      size_t count;
      int peer;
    } p2p;
    struct {
      pid_t pid;
      uint8_t channelId;
      int peer;
      int nSteps;
      int chunkSize;
      int isSend;
    } proxyOp;
    struct {
      int step;
    } proxyStep;
  };
} ncclProfilerEventDescr_v2_t;

typedef union {
  struct {
    size_t transSize;
    int steps;
  } proxyOp;
  struct {
    int appendedProxyOps;
  } proxyCtrl;
} ncclProfilerEventStateArgs_v2_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** context, int* eActivationMask);
  ncclResult_t (*startEvent)(void* context, void** eHandle, ncclProfilerEventDescr_v2_t* eDescr);
  ncclResult_t (*stopEvent)(void* eHandle);
  ncclResult_t (*recordEventState)(void* eHandle, ncclProfilerEventState_v2_t eState,
                                   ncclProfilerEventStateArgs_v2_t* eStateArgs);
  ncclResult_t (*finalize)(void* context);
} ncclProfiler_v2_t;

/* ---- version 1 ------------------------------------------------------------------------------ */

/* Version 1 gives the function, type, algorithm and protocol as NCCL's indices (ncclFunc_t,
 * ncclDataType_t, NCCL_ALGO_*, NCCL_PROTO_* of nccl_tuner.h). */
typedef struct {
  uint8_t type;
  void* parentObj;
  int rank;
  union {
    struct {
      const char* name;
      uint64_t commHash;
      uint64_t seqNumber;
      uint8_t func;
      void const* sendBuff;
      void* recvBuff;
      size_t count;
      int root;
      uint8_t datatype;
      uint32_t op;
      size_t trafficBytes;
      uint8_t nMaxChannels;
      uint8_t nWarps;
      uint8_t algo;
      uint8_t proto;
      int isCollnet;
      int isNvls;
    } coll;
    struct {
      const char* name;
      uint64_t commHash;
      uint8_t func;
      void* buff;
      uint8_t datatype;
      size_t count;
      int peer;
    } p2p;
    struct {
      pid_t pid;
      uint8_t channelId;
      int peer;
      int nSteps;
      int chunkSize;
      int isSend;
    } proxyOp;
    struct {
      int step;
    } proxyStep;
  };
} ncclProfilerEventDescr_v1_t;

typedef union {
  struct {
    size_t transSize;
    int steps;
  } proxyOp;
  struct {
    int appendedProxyOps;
  } proxyCtrl;
} ncclProfilerEventStateArgs_v1_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** context, int* eActivationMask);
  ncclResult_t (*startEvent)(void* context, void** eHandle, ncclProfilerEventDescr_v1_t* eDescr);
  ncclResult_t (*stopEvent)(void* eHandle);
  ncclResult_t (*recordEventState)(void* eHandle, ncclProfilerEventState_v1_t eState,
                                   ncclProfilerEventStateArgs_v1_t* eStateArgs);
  ncclResult_t (*finalize)(void* context);
} ncclProfiler_v1_t;

/* The newest version. */
typedef ncclProfiler_v5_t ncclProfiler_t;
typedef ncclProfilerEventDescr_v5_t ncclProfilerEventDescr_t;
typedef ncclProfilerEventStateArgs_v5_t ncclProfilerEventStateArgs_t;

#ifdef __cplusplus
}
#endif

#endif /* NCCL_PROFILER_H_ */
