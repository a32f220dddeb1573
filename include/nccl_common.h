/*
 * Braid: what NCCL 2.28.9's plugin interfaces share (nccl_tuner.h, nccl_env.h): the log
 * levels and subsystem bits of the logger NCCL hands a plugin, the logger's type, and the
 * collective function ids. Values and layouts are NCCL's, so a plugin built against NVIDIA's
 * headers runs unchanged on Braid; the text is Braid's own.
 */
#ifndef NCCL_COMMON_H_
#define NCCL_COMMON_H_

#include <stdint.h>

#include "nccl.h"

/* The level of a message given to the logger. */
typedef enum {
  NCCL_LOG_NONE = 0,
  NCCL_LOG_VERSION = 1,
  NCCL_LOG_WARN = 2,
  NCCL_LOG_INFO = 3,
  NCCL_LOG_ABORT = 4,
  NCCL_LOG_TRACE = 5
} ncclDebugLogLevel;

/* Subsystem bits of a message (NCCL_DEBUG_SUBSYS filters on them). */
typedef enum {
  NCCL_INIT = 0x1,
  NCCL_COLL = 0x2,
  NCCL_P2P = 0x4,
  NCCL_SHM = 0x8,
  NCCL_NET = 0x10,
  NCCL_GRAPH = 0x20,
  NCCL_TUNING = 0x40,
  NCCL_ENV = 0x80,
  NCCL_ALLOC = 0x100,
  NCCL_CALL = 0x200,
  NCCL_PROXY = 0x400,
  NCCL_NVLS = 0x800,
  NCCL_BOOTSTRAP = 0x1000,
  NCCL_REG = 0x2000,
  NCCL_PROFILE = 0x4000,
  NCCL_RAS = 0x8000,
  NCCL_ALL = ~0
} ncclDebugLogSubSys;

/* The logger a plugin receives: printf-style, printed with NCCL's line prefix when the level
 * and the subsystem bits (flags) are enabled. */
typedef void (*ncclDebugLogger_t)(ncclDebugLogLevel level, unsigned long flags, const char* file, int line,
                                  const char* fmt, ...);

/* The events a net plugin reports through the profiler callback NCCL hands it (net v10 on). */
enum {
  ncclProfilerNetEventStart = 0,
  ncclProfilerNetEventStop = 1,
  ncclProfilerNetEventUpdate = 2,
  ncclProfilerNetEventUpdateAndStop = 3
};

/* The profiler callback a net plugin receives at init (v10, v11): with the phandle isend or
 * irecv got, it starts an event of the plugin's (NetPlugin) under that call's ProxyStep in the
 * profiler plugin; with the handle it set, it updates or stops it. */
typedef ncclResult_t (*ncclProfilerCallback_t)(void** eHandle, int type, void* pHandle, int64_t pluginId,
                                               void* extData);

/* Collective functions as a tuner sees them; a tuner is asked about the first five. */
#define NCCL_NUM_FUNCTIONS 5
typedef enum {
  ncclFuncBroadcast = 0,
  ncclFuncReduce = 1,
  ncclFuncAllGather = 2,
  ncclFuncReduceScatter = 3,
  ncclFuncAllReduce = 4,
  ncclFuncSendRecv = 5,
  ncclFuncSend = 6,
  ncclFuncRecv = 7,
  ncclNumFuncs = 8
} ncclFunc_t;

#endif /* NCCL_COMMON_H_ */
