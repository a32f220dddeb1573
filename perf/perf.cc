#include "perf/perf.h"
#include "perf/perf_device.h"

#include <getopt.h>
#include <nccl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#if BRAID_PERF_MPI
#include <mpi.h>
#endif

namespace braid::perf {

namespace {

struct Options {
  size_t minBytes = 32 * 1024 * 1024, maxBytes = 32 * 1024 * 1024;
  double factor = 1;
  size_t increment = 0;
  int iters = 20, warmup = 1, check = 1, root = 0, blocking = 1, ranks = 2;
  bool threads = false;
  bool gpu = false;       ///< ranks run on CUDA device 0 with device buffers (perf_device.h)
  int launchedRank = -1;  ///< >= 0: started by a launcher as this one rank of `ranks`
  int uniqueIds = 1;      ///< > 1: ncclCommInitRankScalable with this many ids (local ranks only)
  std::vector<ncclUniqueId> moreIds;  ///< ids 1..uniqueIds-1 (the first is the one every path has)
  std::vector<ncclDataType_t> types = {ncclFloat};
  std::vector<ncclRedOp_t> ops = {ncclSum};
};

struct TypeName {
  const char* name;
  ncclDataType_t type;
  size_t size;
};
const TypeName kTypes[] = {{"int8", ncclInt8, 1},     {"uint8", ncclUint8, 1},       {"int32", ncclInt32, 4},
                           {"uint32", ncclUint32, 4}, {"int64", ncclInt64, 8},       {"uint64", ncclUint64, 8},
                           {"half", ncclFloat16, 2},  {"float", ncclFloat32, 4},     {"double", ncclFloat64, 8},
                           {"bfloat16", ncclBfloat16, 2}, {"f8e4m3", ncclFloat8e4m3, 1}, {"f8e5m2", ncclFloat8e5m2, 1}};
const char* const kOpNames[] = {"sum", "prod", "max", "min", "avg"};

const char* typeName(ncclDataType_t t) { return kTypes[t].name; }
size_t typeSize(ncclDataType_t t) { return kTypes[t].size; }

const char* collName(Coll c) {
  static const char* const names[] = {"AllReduce", "AllGather", "ReduceScatter", "Broadcast", "Reduce", "AlltoAll", "SendRecv", "Put"};
  return names[static_cast<int>(c)];
}
bool reduces(Coll c) { return c == Coll::kAllReduce || c == Coll::kReduceScatter || c == Coll::kReduce; }
bool rooted(Coll c) { return c == Coll::kBroadcast || c == Coll::kReduce; }
/// nccl-tests' bus bandwidth factor.
double busFactor(Coll c, int n) {
  switch (c) {
    case Coll::kAllReduce: return 2.0 * (n - 1) / n;
    case Coll::kAllGather:
    case Coll::kReduceScatter:
    case Coll::kAlltoAll: return static_cast<double>(n - 1) / n;
    default: return 1.0;
  }
}
/// Elements per rank for a "size" (AllGather, ReduceScatter, AlltoAll: size is the whole buffer).
size_t countFor(Coll c, size_t bytes, size_t es, int n) {
  const bool whole = c == Coll::kAllGather || c == Coll::kReduceScatter || c == Coll::kAlltoAll;
  return whole ? bytes / es / n : bytes / es;
}

size_t parseSize(const char* s) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  switch (*end) {
    case 'G': case 'g': v *= 1024; [[fallthrough]];
    case 'M': case 'm': v *= 1024; [[fallthrough]];
    case 'K': case 'k': v *= 1024; break;
    default: break;
  }
  return static_cast<size_t>(v);
}

void usage(const char* prog) {
  std::fprintf(stderr,
               "usage: %s [options]\n"
               "  -b, --minbytes SIZE     smallest size (K, M, G suffixes) [32M]\n"
               "  -e, --maxbytes SIZE     largest size [32M]\n"
               "  -f, --stepfactor F      multiply the size by F each step\n"
               "  -i, --stepbytes SIZE    add SIZE each step (when no factor)\n"
               "  -n, --iters N           timed iterations [20]\n"
               "  -w, --warmup_iters N    warm-up iterations [1]\n"
               "  -c, --check 0|1         check results [1]\n"
               "  -d, --datatype T|all    int8 uint8 int32 uint32 int64 uint64 half float double bfloat16 f8e4m3 f8e5m2\n"
               "  -o, --op OP|all         sum prod max min avg\n"
               "  -r, --root R            root rank, -1 for every rank [0]\n"
               "  -z, --blocking 0|1      accepted for compatibility (host calls always complete)\n"
               "  -G, --cudagraph N       CUDA graphs: not available on the host backend (must be 0)\n"
               "  -t, -g                  accepted for compatibility: use --ranks\n"
               "      --ranks N           local ranks to launch [2]\n"
               "      --threads           ranks as threads of this process (default: processes)\n"
               "      --unique-ids N      create the local ranks with ncclCommInitRankScalable and N ids [1]\n"
               "Under a launcher (one rank per process): built with MPI (-Dmpi=enabled) and started by mpirun,\n"
               "MPI gives the rank and count and carries the unique id. Otherwise RANK/WORLD_SIZE (torchrun),\n"
               "OMPI_COMM_WORLD_RANK/SIZE (mpirun), PMI_RANK/PMI_SIZE or SLURM_PROCID/SLURM_NTASKS give them and\n"
               "the ranks meet through NCCL_COMM_ID, or MASTER_ADDR:(MASTER_PORT+1) when NCCL_COMM_ID is unset\n"
               "(torchrun's own store holds MASTER_PORT).\n",
               prog);
}

bool parse(int argc, char** argv, Options* o) {
  static const option longs[] = {{"minbytes", required_argument, nullptr, 'b'}, {"maxbytes", required_argument, nullptr, 'e'},
                                 {"stepfactor", required_argument, nullptr, 'f'}, {"stepbytes", required_argument, nullptr, 'i'},
                                 {"iters", required_argument, nullptr, 'n'}, {"warmup_iters", required_argument, nullptr, 'w'},
                                 {"check", required_argument, nullptr, 'c'}, {"datatype", required_argument, nullptr, 'd'},
                                 {"op", required_argument, nullptr, 'o'}, {"root", required_argument, nullptr, 'r'},
                                 {"blocking", required_argument, nullptr, 'z'}, {"cudagraph", required_argument, nullptr, 'G'},
                                 {"nthreads", required_argument, nullptr, 't'}, {"ngpus", required_argument, nullptr, 'g'},
                                 {"ranks", required_argument, nullptr, 'R'}, {"threads", no_argument, nullptr, 'T'},
                                 {"unique-ids", required_argument, nullptr, 'U'},
                                 {"help", no_argument, nullptr, 'h'}, {nullptr, 0, nullptr, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "b:e:f:i:n:w:c:d:o:r:z:G:t:g:a:m:p:h", longs, nullptr)) != -1) {
    switch (c) {
      case 'b': o->minBytes = parseSize(optarg); break;
      case 'e': o->maxBytes = parseSize(optarg); break;
      case 'f': o->factor = std::atof(optarg); break;
      case 'i': o->increment = parseSize(optarg); o->factor = 1; break;
      case 'n': o->iters = std::atoi(optarg); break;
      case 'w': o->warmup = std::atoi(optarg); break;
      case 'c': o->check = std::atoi(optarg); break;
      case 'r': o->root = std::atoi(optarg); break;
      case 'z': o->blocking = std::atoi(optarg); break;
      case 'G':
        if (std::atoi(optarg) != 0) {
          std::fprintf(stderr, "-G: CUDA graphs need the CUDA backend; the host backend runs without them\n");
          return false;
        }
        break;
      case 't': case 'g': case 'a': case 'm': case 'p': break;
      case 'R': o->ranks = std::atoi(optarg); break;
      case 'T': o->threads = true; break;
      case 'U': o->uniqueIds = std::atoi(optarg); break;
      case 'd': {
        o->types.clear();
        for (const auto& t : kTypes) {
          if (std::strcmp(optarg, "all") == 0 || std::strcmp(optarg, t.name) == 0) o->types.push_back(t.type);
        }
        if (o->types.empty()) {
          std::fprintf(stderr, "unknown datatype '%s'\n", optarg);
          return false;
        }
        break;
      }
      case 'o': {
        o->ops.clear();
        for (int i = 0; i < 5; ++i) {
          if (std::strcmp(optarg, "all") == 0 || std::strcmp(optarg, kOpNames[i]) == 0) o->ops.push_back(static_cast<ncclRedOp_t>(i));
        }
        if (o->ops.empty()) {
          std::fprintf(stderr, "unknown op '%s'\n", optarg);
          return false;
        }
        break;
      }
      default: usage(argv[0]); return false;
    }
  }
  if (o->ranks < 1 || o->iters < 1 || o->minBytes > o->maxBytes || (o->factor <= 1 && o->increment == 0 && o->minBytes != o->maxBytes)) {
    std::fprintf(stderr, "invalid options: need --ranks >= 1, -n >= 1, -b <= -e, and -f > 1 or -i > 0 to step\n");
    return false;
  }
  return true;
}

#define PERF_CHECK(call)                                                                                       \
  do {                                                                                                         \
    const ncclResult_t r_ = (call);                                                                            \
    if (r_ != ncclSuccess) {                                                                                   \
      std::fprintf(stderr, "rank %d: %s failed: %s (%s)\n", rank, #call, ncclGetErrorString(r_), ncclGetLastError(nullptr)); \
      std::exit(1);                                                                                            \
    }                                                                                                          \
  } while (0)

/// One rank of the benchmark. With o.gpu its buffers are device memory (mirrored on the host
/// to fill and check them) and its calls go to a stream of its own.
class Rank {
 public:
  Rank(Coll coll, const Options& o, const ncclUniqueId& id, int rankIndex) : rank(rankIndex), coll_(coll), o_(o) {
    if (o.gpu) {  // every device buffer now: allocating later could wait for other ranks' kernels
      device::select(0);
      stream_ = device::newStream();
      deviceBytes_ = o.maxBytes + 64;
      deviceSend_ = static_cast<char*>(device::allocate(deviceBytes_));
      deviceRecv_ = static_cast<char*>(device::allocate(deviceBytes_));
      deviceScratch_ = device::allocate(64);
    }
    if (o.uniqueIds > 1) {
      std::vector<ncclUniqueId> ids{id};
      ids.insert(ids.end(), o.moreIds.begin(), o.moreIds.end());
      PERF_CHECK(ncclCommInitRankScalable(&comm_, o.ranks, rank, o.uniqueIds, ids.data(), nullptr));
    } else {
      PERF_CHECK(ncclCommInitRank(&comm_, o.ranks, id, rank));
    }
    if (coll == Coll::kPut) {  // puts land in a window: the receive buffer, from ncclMemAlloc
      windowBytes_ = o.maxBytes + 64;
      PERF_CHECK(ncclMemAlloc(reinterpret_cast<void**>(&window_), windowBytes_));
      PERF_CHECK(ncclCommWindowRegister(comm_, window_, windowBytes_, &win_, NCCL_WIN_DEFAULT));
    }
  }
  ~Rank() {
    if (win_ != nullptr) ncclCommWindowDeregister(comm_, win_);
    ncclCommDestroy(comm_);
    if (window_ != nullptr) ncclMemFree(window_);
    if (o_.gpu) {
      for (void* p : {static_cast<void*>(deviceSend_), static_cast<void*>(deviceRecv_), deviceScratch_}) device::release(p);
      device::deleteStream(stream_);
    }
  }

  /// Runs one operation; returns the wall time in microseconds of the timed loop's average.
  void runOp(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t op, int root) {
    const int n = o_.ranks;
    cudaStream_t s = static_cast<cudaStream_t>(stream_);
    switch (coll_) {
      case Coll::kAllReduce: PERF_CHECK(ncclAllReduce(send, recv, count, t, op, comm_, s)); break;
      case Coll::kAllGather: PERF_CHECK(ncclAllGather(send, recv, count, t, comm_, s)); break;
      case Coll::kReduceScatter: PERF_CHECK(ncclReduceScatter(send, recv, count, t, op, comm_, s)); break;
      case Coll::kBroadcast: PERF_CHECK(ncclBroadcast(send, recv, count, t, root, comm_, s)); break;
      case Coll::kReduce: PERF_CHECK(ncclReduce(send, recv, count, t, op, root, comm_, s)); break;
      case Coll::kAlltoAll: PERF_CHECK(ncclAlltoAll(send, recv, count, t, comm_, s)); break;
      case Coll::kSendRecv:
        PERF_CHECK(ncclGroupStart());
        PERF_CHECK(ncclSend(send, count, t, (rank + 1) % n, comm_, s));
        PERF_CHECK(ncclRecv(recv, count, t, (rank + n - 1) % n, comm_, s));
        PERF_CHECK(ncclGroupEnd());
        break;
      case Coll::kPut: {
        PERF_CHECK(ncclPutSignal(send, count, t, (rank + 1) % n, win_, 0, 0, 0, 0, comm_, s));
        ncclWaitSignalDesc_t fromPrevious = {1, (rank + n - 1) % n, 0, 0};
        PERF_CHECK(ncclWaitSignal(1, &fromPrevious, comm_, s));
        break;
      }
    }
  }

  double averageOverRanks(double v) {
    double d[2] = {v, 0};
    double* buffer = static_cast<double*>(scratch(sizeof(d)));
    if (o_.gpu) device::toDevice(buffer, d, sizeof(d), stream_);
    else std::memcpy(buffer, d, sizeof(d));
    PERF_CHECK(ncclAllReduce(buffer, buffer + 1, 1, ncclFloat64, ncclSum, comm_, static_cast<cudaStream_t>(stream_)));
    if (o_.gpu) {
      device::toHost(d, buffer, sizeof(d), stream_);
    } else {
      std::memcpy(d, buffer, sizeof(d));
    }
    return d[1] / o_.ranks;
  }

  /// Returns {time us, wrong elements} of one size/type/op/root, out of place or in place.
  std::pair<double, long> measure(size_t count, ncclDataType_t t, ncclRedOp_t op, int root, bool inPlace) {
    const int n = o_.ranks;
    const size_t es = typeSize(t);
    const bool sendBlocks = coll_ == Coll::kReduceScatter || coll_ == Coll::kAlltoAll;
    const bool recvBlocks = coll_ == Coll::kAllGather || coll_ == Coll::kAlltoAll;
    const size_t sendBytes = count * es * (sendBlocks ? n : 1), recvBytes = count * es * (recvBlocks ? n : 1);
    std::vector<char>& send = sendBuf_;
    std::vector<char>& recv = recvBuf_;
    if (send.size() < sendBytes + 64) send.resize(sendBytes + 64);
    if (recv.size() < std::max(recvBytes, sendBytes) + 64) recv.resize(std::max(recvBytes, sendBytes) + 64);
    if (o_.gpu && deviceBytes_ < std::max(sendBytes, recvBytes)) {
      std::fprintf(stderr, "rank %d: %zu bytes do not fit the device buffers of %zu\n", rank, std::max(sendBytes, recvBytes),
                   deviceBytes_);
      std::exit(1);
    }
    char* sendBase = o_.gpu ? deviceSend_ : send.data();
    char* recvBase = coll_ == Coll::kPut ? window_ : o_.gpu ? deviceRecv_ : recv.data();
    const void* s = sendBase;
    void* r = recvBase;
    if (inPlace) {
      if (coll_ == Coll::kAllGather) {
        s = recvBase + rank * count * es;
      } else if (coll_ == Coll::kReduceScatter) {
        s = recvBase;
        r = recvBase + rank * count * es;
      } else if (coll_ != Coll::kAlltoAll && coll_ != Coll::kSendRecv && coll_ != Coll::kPut) {
        s = recvBase;
      }
    }
    long wrong = 0;
    if (o_.check) wrong = checkedRun(s, r, count, t, op, root, inPlace);
    for (int i = 0; i < o_.warmup; ++i) runOp(s, r, count, t, op, root);
    if (o_.gpu) device::synchronize(stream_);
    barrier();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < o_.iters; ++i) runOp(s, r, count, t, op, root);
    if (o_.gpu) device::synchronize(stream_);
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / o_.iters;
    return {averageOverRanks(us), wrong};
  }

  int rank;

 private:
  /// At least 64 bytes the collectives can use (device memory with o.gpu).
  void* scratch(size_t bytes) {
    if (o_.gpu) return deviceScratch_;
    if (scratch_.size() < bytes) scratch_.resize(bytes);
    return scratch_.data();
  }
  void barrier() { averageOverRanks(1); }

  /// The host mirror of a pointer into the buffers the collectives use.
  char* mirrorOf(const void* p) {
    const char* c = static_cast<const char*>(p);
    if (!o_.gpu) return const_cast<char*>(c);
    if (c >= deviceSend_ && c < deviceSend_ + deviceBytes_) return sendBuf_.data() + (c - deviceSend_);
    return recvBuf_.data() + (c - deviceRecv_);
  }

  /// Fills inputs with small integers (exact in every type), runs once, counts wrong outputs.
  long checkedRun(const void* s, void* r, size_t count, ncclDataType_t t, ncclRedOp_t op, int root, bool inPlace) {
    const int n = o_.ranks;
    const size_t es = typeSize(t);
    const bool sendBlocks = coll_ == Coll::kReduceScatter || coll_ == Coll::kAlltoAll;
    const bool recvBlocks = coll_ == Coll::kAllGather || coll_ == Coll::kAlltoAll;
    char* in = mirrorOf(s);
    const size_t inElems = count * (sendBlocks ? n : 1);
    // Byte patterns are exact for copies; reductions use 0/1 bytes per element (exact sums in
    // every type when interpreted bytewise is not the point: they use whole-element values).
    for (size_t i = 0; i < inElems; ++i) setValue(in + i * es, t, reduces(coll_) ? static_cast<double>((rank + i) % 2) : static_cast<double>((rank * 7 + i) % 5));
    (void)inPlace;
    if (o_.gpu) device::toDevice(const_cast<void*>(s), in, inElems * es, stream_);
    runOp(s, r, count, t, op, root);
    const char* out = mirrorOf(r);
    if (o_.gpu) device::toHost(const_cast<char*>(out), r, count * es * (recvBlocks ? n : 1), stream_);
    long wrong = 0;
    // Avg on floating types multiplies each input by a rounded 1/n: allow the type's rounding.
    const bool floating = t >= ncclFloat16 && t != ncclInt8;
    const double tolerance = op != ncclAvg || !floating ? 0
                             : (t == ncclFloat8e4m3 || t == ncclFloat8e5m2) ? 0.13
                             : (t == ncclFloat16 || t == ncclBfloat16)      ? 0.01
                                                                            : 1e-6;
    auto expectElem = [&](const char* p, double want) {
      if (std::fabs(getValue(p, t) - want) > tolerance * std::max(1.0, std::fabs(want))) ++wrong;
    };
    switch (coll_) {
      case Coll::kAllReduce:
      case Coll::kReduce:
        if (coll_ == Coll::kReduce && rank != root) break;
        for (size_t i = 0; i < count; ++i) expectElem(out + i * es, reduced(op, t, n, i));
        break;
      case Coll::kReduceScatter:
        for (size_t i = 0; i < count; ++i) expectElem(out + i * es, reduced(op, t, n, rank * count + i));
        break;
      case Coll::kAllGather:
        for (int p = 0; p < n; ++p)
          for (size_t i = 0; i < count; ++i) expectElem(out + (p * count + i) * es, static_cast<double>((p * 7 + i) % 5));
        break;
      case Coll::kBroadcast:
        for (size_t i = 0; i < count; ++i) expectElem(out + i * es, static_cast<double>((root * 7 + i) % 5));
        break;
      case Coll::kAlltoAll:
        for (int p = 0; p < n; ++p)
          for (size_t i = 0; i < count; ++i) expectElem(out + (p * count + i) * es, static_cast<double>((p * 7 + rank * count + i) % 5));
        break;
      case Coll::kSendRecv:
      case Coll::kPut: {
        const int prev = (rank + n - 1) % n;
        for (size_t i = 0; i < count; ++i) expectElem(out + i * es, static_cast<double>((prev * 7 + i) % 5));
        break;
      }
    }
    return wrong;
  }

  static double reduced(ncclRedOp_t op, ncclDataType_t t, int n, size_t i) {
    double acc = 0, ones = 0;
    for (int r = 0; r < n; ++r) ones += (r + i) % 2;
    switch (op) {
      case ncclProd: acc = ones == n ? 1 : 0; break;
      case ncclMax: acc = ones > 0 ? 1 : 0; break;
      case ncclMin: acc = ones == n ? 1 : 0; break;
      case ncclAvg: acc = (t == ncclInt8 || t == ncclUint8 || t == ncclInt32 || t == ncclUint32 || t == ncclInt64 || t == ncclUint64) ? std::floor(ones / n) : ones / n; break;
      default: acc = ones; break;
    }
    return acc;
  }

  static void setValue(char* p, ncclDataType_t t, double v);
  static double getValue(const char* p, ncclDataType_t t);

  Coll coll_;
  const Options& o_;
  ncclComm_t comm_ = nullptr;
  std::vector<char> sendBuf_, recvBuf_, scratch_;
  void* stream_ = nullptr;  // o.gpu: this rank's stream
  char* deviceSend_ = nullptr;
  char* deviceRecv_ = nullptr;
  size_t deviceBytes_ = 0;
  void* deviceScratch_ = nullptr;
  char* window_ = nullptr;  // kPut: the window puts land in
  size_t windowBytes_ = 0;
  ncclWindow_t win_ = nullptr;
};

// Small integers in every type. Half/bfloat16/fp8 hold the small integers used here exactly;
// their encodings are computed by hand to keep the tool independent of Braid's internals.
void Rank::setValue(char* p, ncclDataType_t t, double v) {
  const int k = static_cast<int>(v);
  switch (t) {
    case ncclInt8: case ncclUint8: *reinterpret_cast<uint8_t*>(p) = static_cast<uint8_t>(k); break;
    case ncclInt32: case ncclUint32: *reinterpret_cast<uint32_t*>(p) = static_cast<uint32_t>(k); break;
    case ncclInt64: case ncclUint64: *reinterpret_cast<uint64_t*>(p) = static_cast<uint64_t>(k); break;
    case ncclFloat32: *reinterpret_cast<float*>(p) = static_cast<float>(v); break;
    case ncclFloat64: *reinterpret_cast<double*>(p) = v; break;
    case ncclBfloat16: {
      const float f = static_cast<float>(v);
      uint32_t u;
      std::memcpy(&u, &f, 4);
      const uint16_t b = static_cast<uint16_t>(u >> 16);  // exact for small integers
      std::memcpy(p, &b, 2);
      break;
    }
    case ncclFloat16: {
      static const uint16_t halves[] = {0x0000, 0x3c00, 0x4000, 0x4200, 0x4400};
      std::memcpy(p, &halves[k], 2);
      break;
    }
    case ncclFloat8e4m3: {
      static const uint8_t codes[] = {0x00, 0x38, 0x40, 0x44, 0x48};
      *reinterpret_cast<uint8_t*>(p) = codes[k];
      break;
    }
    default: {
      static const uint8_t codes[] = {0x00, 0x3c, 0x40, 0x42, 0x44};
      *reinterpret_cast<uint8_t*>(p) = codes[k];
      break;
    }
  }
}

double Rank::getValue(const char* p, ncclDataType_t t) {
  switch (t) {
    case ncclInt8: return *reinterpret_cast<const int8_t*>(p);
    case ncclUint8: return *reinterpret_cast<const uint8_t*>(p);
    case ncclInt32: return *reinterpret_cast<const int32_t*>(p);
    case ncclUint32: return *reinterpret_cast<const uint32_t*>(p);
    case ncclInt64: return static_cast<double>(*reinterpret_cast<const int64_t*>(p));
    case ncclUint64: return static_cast<double>(*reinterpret_cast<const uint64_t*>(p));
    case ncclFloat32: return *reinterpret_cast<const float*>(p);
    case ncclFloat64: return *reinterpret_cast<const double*>(p);
    case ncclBfloat16: {
      uint16_t b;
      std::memcpy(&b, p, 2);
      const uint32_t u = static_cast<uint32_t>(b) << 16;
      float f;
      std::memcpy(&f, &u, 4);
      return f;
    }
    default: {
      // half and fp8: decode sign/exponent/mantissa generically.
      const int bits = t == ncclFloat16 ? 16 : 8;
      const int mant = t == ncclFloat16 ? 10 : (t == ncclFloat8e4m3 ? 3 : 2);
      const int expBits = bits - 1 - mant;
      const int bias = (1 << (expBits - 1)) - 1;
      uint32_t code = 0;
      std::memcpy(&code, p, bits / 8);
      const int e = static_cast<int>((code >> mant) & ((1u << expBits) - 1));
      const double m = code & ((1u << mant) - 1);
      const double mag = e == 0 ? std::ldexp(m, 1 - bias - mant) : std::ldexp(1 + m / (1 << mant), e - bias);
      return (code >> (bits - 1)) ? -mag : mag;
    }
  }
}

void printHeader(Coll coll, const Options& o) {
  if (o.gpu) {
    std::printf("# %s_perf (Braid, CUDA device 0: %s): %d ranks as %s\n", collName(coll), device::name(), o.ranks,
                o.launchedRank >= 0 ? "launched processes" : o.threads ? "threads" : "processes");
  } else {
    std::printf("# %s_perf (Braid host backend): %d ranks as %s\n", collName(coll), o.ranks,
                o.launchedRank >= 0 ? "launched processes" : o.threads ? "threads" : "processes");
  }
  std::printf("# minBytes %zu maxBytes %zu step: %g(%s) warmup iters: %d iters: %d validation: %d\n", o.minBytes,
              o.maxBytes, o.increment ? static_cast<double>(o.increment) : o.factor, o.increment ? "bytes" : "factor",
              o.warmup, o.iters, o.check);
  std::printf("#\n");
  std::printf("#%77s %35s\n", "out-of-place", "in-place");
  std::printf("#%11s %13s %9s %7s %6s %8s %7s %7s %6s %8s %7s %7s %6s\n", "size", "count", "type", "redop", "root",
              "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
  std::printf("#%11s %13s %9s %7s %6s %8s %7s %7s %6s %8s %7s %7s %6s\n", "(B)", "(elements)", "", "", "", "(us)",
              "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
  std::fflush(stdout);
}

/// Runs every size/type/op/root on one rank; rank 0 prints. Returns total wrong values.
long runRank(Coll coll, const Options& o, const ncclUniqueId& id, int rankIndex, double* busSum, int* rows) {
  Rank rank(coll, o, id, rankIndex);
  long wrongTotal = 0;
  const bool progress = rankIndex == 0 && isatty(STDERR_FILENO);
  for (size_t bytes = o.minBytes; bytes <= o.maxBytes;) {
    for (ncclDataType_t t : o.types) {
      const size_t es = typeSize(t);
      const size_t count = countFor(coll, bytes, es, o.ranks);
      const size_t size = count * es * ((coll == Coll::kAllGather || coll == Coll::kReduceScatter || coll == Coll::kAlltoAll) ? o.ranks : 1);
      const std::vector<ncclRedOp_t> ops = reduces(coll) ? o.ops : std::vector<ncclRedOp_t>{ncclSum};
      for (ncclRedOp_t op : ops) {
        const int firstRoot = rooted(coll) ? (o.root < 0 ? 0 : o.root) : -1;
        const int lastRoot = rooted(coll) ? (o.root < 0 ? o.ranks - 1 : o.root) : -1;
        for (int root = firstRoot; root <= lastRoot; ++root) {
          const auto outOfPlace = rank.measure(count, t, op, root < 0 ? 0 : root, false);
          const auto inPlace = rank.measure(count, t, op, root < 0 ? 0 : root, true);
          wrongTotal += outOfPlace.second + inPlace.second;
          if (rankIndex == 0) {
            auto bw = [&](double us) { return us > 0 ? size / us / 1000.0 : 0.0; };
            const double factor = busFactor(coll, o.ranks);
            std::printf(" %12zu %13zu %9s %7s %6d %8.2f %7.2f %7.2f %6ld %8.2f %7.2f %7.2f %6ld\n", size, count,
                        typeName(t), reduces(coll) ? kOpNames[op] : "none", root, outOfPlace.first,
                        bw(outOfPlace.first), bw(outOfPlace.first) * factor, outOfPlace.second, inPlace.first,
                        bw(inPlace.first), bw(inPlace.first) * factor, inPlace.second);
            std::fflush(stdout);
            *busSum += bw(outOfPlace.first) * factor;
            ++*rows;
          }
          if (progress) std::fprintf(stderr, ".");
        }
      }
    }
    if (bytes == o.maxBytes) break;
    const size_t next = o.increment ? bytes + o.increment : static_cast<size_t>(bytes * o.factor);
    bytes = std::min(std::max(next, bytes + 1), o.maxBytes);
  }
  if (progress) std::fprintf(stderr, "\n");
  // Launched ranks are separate programs: rank 0 reports the wrong values of all of them.
  if (o.launchedRank >= 0) wrongTotal = std::lround(rank.averageOverRanks(static_cast<double>(wrongTotal)) * o.ranks);
  return wrongTotal;
}

/// Started by an MPI launcher (mpirun / srun with PMIx) in a build with the MPI feature: MPI
/// then gives the rank and the count, and carries the unique id.
bool underMpi() {
#if BRAID_PERF_MPI
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr ||
         std::getenv("PMI_SIZE") != nullptr;
#else
  return false;
#endif
}

/// The unique id every rank uses: from MPI (rank 0 makes it, MPI_Bcast carries it), else from
/// ncclGetUniqueId (NCCL_COMM_ID makes every launched rank compute the same one).
bool uniqueId(const Options& o, ncclUniqueId* id) {
#if BRAID_PERF_MPI
  if (underMpi()) {
    if (o.launchedRank == 0 && ncclGetUniqueId(id) != ncclSuccess) {
      std::fprintf(stderr, "ncclGetUniqueId failed: %s\n", ncclGetLastError(nullptr));
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Bcast(id, sizeof *id, MPI_BYTE, 0, MPI_COMM_WORLD);
    return true;
  }
#endif
  (void)o;
  if (ncclGetUniqueId(id) != ncclSuccess) {
    std::fprintf(stderr, "ncclGetUniqueId failed: %s\n", ncclGetLastError(nullptr));
    return false;
  }
  return true;
}

int finish(const Options& o, int status) {
#if BRAID_PERF_MPI
  if (underMpi()) MPI_Finalize();
#endif
  (void)o;
  return status;
}

/// This process's rank and the rank count from a launcher's environment; false when none set them.
bool fromLauncher(Options* o, std::string* error) {
#if BRAID_PERF_MPI
  if (underMpi()) {
    MPI_Init(nullptr, nullptr);
    MPI_Comm_rank(MPI_COMM_WORLD, &o->launchedRank);
    MPI_Comm_size(MPI_COMM_WORLD, &o->ranks);
    return true;
  }
#endif
  static const char* const kPairs[][2] = {{"RANK", "WORLD_SIZE"},
                                          {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                          {"PMI_RANK", "PMI_SIZE"},
                                          {"SLURM_PROCID", "SLURM_NTASKS"}};
  for (const auto& pair : kPairs) {
    const char* rank = std::getenv(pair[0]);
    const char* size = std::getenv(pair[1]);
    if (rank == nullptr || size == nullptr) continue;
    o->launchedRank = std::atoi(rank);
    o->ranks = std::atoi(size);
    if (o->ranks < 1 || o->launchedRank < 0 || o->launchedRank >= o->ranks) {
      *error = std::string(pair[0]) + "=" + rank + " and " + pair[1] + "=" + size + " do not name a rank of a job";
      return false;
    }
    if (std::getenv("NCCL_COMM_ID") != nullptr) return true;
    const char* addr = std::getenv("MASTER_ADDR");
    const char* port = std::getenv("MASTER_PORT");
    if (addr == nullptr || port == nullptr || std::atoi(port) <= 0 || std::atoi(port) >= 65535) {
      *error = std::string("launched as rank ") + rank + " of " + size +
               ", but neither NCCL_COMM_ID nor MASTER_ADDR and MASTER_PORT say where the ranks meet";
      return false;
    }
    const std::string commId = std::string(addr) + ":" + std::to_string(std::atoi(port) + 1);
    setenv("NCCL_COMM_ID", commId.c_str(), 1);
    return true;
  }
  return true;
}

}  // namespace

int run(Coll coll, int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, &o)) return 2;
  std::string launcherError;
  if (!fromLauncher(&o, &launcherError)) {
    std::fprintf(stderr, "%s\n", launcherError.c_str());
    return 2;
  }
  if (rooted(coll) && o.root >= o.ranks) {
    std::fprintf(stderr, "-r %d: the root must be below --ranks %d\n", o.root, o.ranks);
    return 2;
  }
  const char* why = "";
  o.gpu = device::usable(&why);
  ncclUniqueId id;
  if (!uniqueId(o, &id)) return 1;
  if (o.uniqueIds != 1) {
    if (o.launchedRank >= 0 || o.uniqueIds < 1 || o.uniqueIds > o.ranks) {
      std::fprintf(stderr, "--unique-ids %d: needs local ranks (--ranks) and at most one id per rank\n", o.uniqueIds);
      return 2;
    }
    o.moreIds.resize(o.uniqueIds - 1);
    for (auto& more : o.moreIds) {
      if (ncclGetUniqueId(&more) != ncclSuccess) return 1;
    }
  }
  double busSum = 0;
  int rows = 0;
  long wrong = 0;
  if (o.launchedRank >= 0) {
    if (o.launchedRank == 0) printHeader(coll, o);
    wrong = runRank(coll, o, id, o.launchedRank, &busSum, &rows);
    if (o.launchedRank != 0) return finish(o, wrong == 0 ? 0 : 1);
  } else if (o.threads) {
    printHeader(coll, o);
    std::vector<std::thread> threads;
    std::vector<long> wrongs(o.ranks, 0);
    for (int r = 0; r < o.ranks; ++r) {
      threads.emplace_back([&, r] { wrongs[r] = runRank(coll, o, id, r, &busSum, &rows); });
    }
    for (auto& t : threads) t.join();
    for (long w : wrongs) wrong += w;
  } else {
    printHeader(coll, o);
    // Rank 0 runs in this process (it prints); the others are forked children.
    std::fflush(stdout);
    std::vector<pid_t> children;
    for (int r = 1; r < o.ranks; ++r) {
      const pid_t pid = fork();
      if (pid == 0) {
        const long w = runRank(coll, o, id, r, &busSum, &rows);
        std::fflush(stdout);
        _exit(w == 0 ? 0 : 3);
      }
      children.push_back(pid);
    }
    wrong = runRank(coll, o, id, 0, &busSum, &rows);
    for (pid_t pid : children) {
      int status = 0;
      waitpid(pid, &status, 0);
      if (!WIFEXITED(status) || WEXITSTATUS(status) == 1) {
        std::fprintf(stderr, "a rank process failed (status %d)\n", status);
        return 1;
      }
      if (WEXITSTATUS(status) == 3) ++wrong;
    }
  }
  std::printf("# Out of bounds values : %ld %s\n", wrong, wrong == 0 ? "OK" : "FAILED");
  std::printf("# Avg bus bandwidth    : %g \n", rows > 0 ? busSum / rows : 0.0);
  std::printf("#\n");
  return finish(o, wrong == 0 ? 0 : 1);
}

}  // namespace braid::perf
