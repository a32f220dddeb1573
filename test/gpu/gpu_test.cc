// The gpu suite: Braid's CUDA backend through the public API, on device buffers and streams.
// Plain C++ (no Catch2: GPU machines may lack it). `gpu_test NAME` runs one test; exit 0 passed,
// 1 failed (the reason on stderr), 77 skipped (the reason on stdout: no CUDA device).
#include <cuda_runtime.h>
#include <nccl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "gpu_checks.h"

namespace {

/// Ranks of one process on device 0, each with a stream of its own.
struct Ranks {
  explicit Ranks(int n) : comms(n), streams(n) {
    std::vector<int> devices(n, 0);
    NCCL_OK(ncclCommInitAll(comms.data(), n, devices.data()));
    for (auto& s : streams) CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  }
  ~Ranks() {
    for (auto c : comms) ncclCommDestroy(c);
    for (auto s : streams) cudaStreamDestroy(s);
  }
  void sync() {
    for (auto s : streams) CUDA_OK(cudaStreamSynchronize(s));
  }
  int size() const { return static_cast<int>(comms.size()); }
  std::vector<ncclComm_t> comms;
  std::vector<cudaStream_t> streams;
};

/// Device buffers of floats with host mirrors.
struct Buffer {
  explicit Buffer(size_t n) : host(n) { CUDA_OK(cudaMalloc(&device, std::max<size_t>(n, 1) * sizeof(float))); }
  ~Buffer() { cudaFree(device); }
  /// (the legacy stream's copy is not ordered with the ranks' non-blocking streams: it is
  /// waited for, as every other setup step on it)
  void upload() {
    CUDA_OK(cudaMemcpy(device, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_OK(cudaStreamSynchronize(cudaStreamLegacy));
  }
  void download() { CUDA_OK(cudaMemcpy(host.data(), device, host.size() * sizeof(float), cudaMemcpyDeviceToHost)); }
  std::vector<float> host;
  float* device = nullptr;
};

float input(int rank, size_t i) { return static_cast<float>((rank * 7 + i) % 5); }  // exact sums in float

/// Every collective and a send/recv ring on `n` ranks of device 0, `count` elements, checked exactly.
void collectives(int n, size_t count, const char* label) {
  Ranks r(n);
  std::vector<Buffer*> send, recv;
  for (int k = 0; k < n; ++k) {
    send.push_back(new Buffer(count * n));
    recv.push_back(new Buffer(count * n));
    for (size_t i = 0; i < count * n; ++i) send[k]->host[i] = input(k, i);
    send[k]->upload();
  }
  auto run = [&](const char* what, const std::function<void(int)>& call, const std::function<float(int, size_t)>& want,
                 const std::function<size_t(int)>& elems) {
    for (int k = 0; k < n; ++k) CUDA_OK(cudaMemset(recv[k]->device, 0xff, count * n * sizeof(float)));
    CUDA_OK(cudaStreamSynchronize(cudaStreamLegacy));
    NCCL_OK(ncclGroupStart());
    for (int k = 0; k < n; ++k) call(k);
    NCCL_OK(ncclGroupEnd());
    r.sync();
    for (int k = 0; k < n; ++k) {
      recv[k]->download();
      long wrong = 0;
      size_t first = 0;
      for (size_t i = 0; i < elems(k); ++i) {
        if (recv[k]->host[i] != want(k, i) && wrong++ == 0) first = i;
      }
      EXPECT(wrong == 0, "%s %s: rank %d of %d, count %zu: %ld wrong, first at %zu (%g, want %g)", label, what, k, n,
             count, wrong, first, recv[k]->host[first], want(k, first));
    }
  };
  auto sumAt = [&](size_t i) {
    float s = 0;
    for (int k = 0; k < n; ++k) s += input(k, i);
    return s;
  };
  run("AllReduce", [&](int k) { NCCL_OK(ncclAllReduce(send[k]->device, recv[k]->device, count, ncclFloat, ncclSum, r.comms[k], r.streams[k])); },
      [&](int, size_t i) { return sumAt(i); }, [&](int) { return count; });
  run("ReduceScatter", [&](int k) { NCCL_OK(ncclReduceScatter(send[k]->device, recv[k]->device, count, ncclFloat, ncclSum, r.comms[k], r.streams[k])); },
      [&](int k, size_t i) { return sumAt(k * count + i); }, [&](int) { return count; });
  run("AllGather", [&](int k) { NCCL_OK(ncclAllGather(send[k]->device, recv[k]->device, count, ncclFloat, r.comms[k], r.streams[k])); },
      [&](int, size_t i) { return input(static_cast<int>(i / std::max<size_t>(count, 1)), i % std::max<size_t>(count, 1)); },
      [&](int) { return count * n; });
  const int root = n - 1;
  run("Broadcast", [&](int k) { NCCL_OK(ncclBroadcast(send[k]->device, recv[k]->device, count, ncclFloat, root, r.comms[k], r.streams[k])); },
      [&](int, size_t i) { return input(root, i); }, [&](int) { return count; });
  run("Reduce", [&](int k) { NCCL_OK(ncclReduce(send[k]->device, recv[k]->device, count, ncclFloat, ncclSum, root, r.comms[k], r.streams[k])); },
      [&](int, size_t i) { return sumAt(i); }, [&](int k) { return k == root ? count : 0; });
  run("AlltoAll", [&](int k) { NCCL_OK(ncclAlltoAll(send[k]->device, recv[k]->device, count, ncclFloat, r.comms[k], r.streams[k])); },
      [&](int k, size_t i) { return input(static_cast<int>(i / std::max<size_t>(count, 1)), k * count + i % std::max<size_t>(count, 1)); },
      [&](int) { return count * n; });
  run("Send/Recv ring", [&](int k) {
        NCCL_OK(ncclSend(send[k]->device, count, ncclFloat, (k + 1) % n, r.comms[k], r.streams[k]));
        NCCL_OK(ncclRecv(recv[k]->device, count, ncclFloat, (k + n - 1) % n, r.comms[k], r.streams[k]));
      },
      [&](int k, size_t i) { return input((k + n - 1) % n, i); }, [&](int) { return count; });
  for (auto* b : send) delete b;
  for (auto* b : recv) delete b;
}

int deviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return 0;
  return count;
}

// ---- the tests -----------------------------------------------------------------------------

void testOneRank() {
  for (size_t count : {size_t(0), size_t(1), size_t(1000), size_t(1) << 20}) collectives(1, count, "1 rank");
}

/// Sends of bytes that split over a peer's connection sets (4 on a GPU, parts of 128 KiB and
/// more), from and into buffers 1 and 37 bytes past an allocation's start, between 2 ranks.
void peerParts() {
  Ranks r(2);
  for (size_t bytes : {size_t(2 * 131072 + 3), size_t(4 * 131072 + 1), size_t(9 << 20) + 5}) {
    for (size_t offset : {size_t(1), size_t(37)}) {
      std::vector<unsigned char*> from(2), to(2);
      std::vector<unsigned char> pattern(bytes + 64);
      for (int k = 0; k < 2; ++k) {
        CUDA_OK(cudaMalloc(&from[k], bytes + 64));
        CUDA_OK(cudaMalloc(&to[k], bytes + 64));
        for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<unsigned char>(i * 11 + i / 1021 + k);
        CUDA_OK(cudaMemcpy(from[k], pattern.data(), pattern.size(), cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemset(to[k], 0xee, bytes + 64));
      }
      CUDA_OK(cudaStreamSynchronize(cudaStreamLegacy));
      NCCL_OK(ncclGroupStart());
      for (int k = 0; k < 2; ++k) {
        NCCL_OK(ncclSend(from[k] + offset, bytes, ncclUint8, 1 - k, r.comms[k], r.streams[k]));
        NCCL_OK(ncclRecv(to[k] + 64 - offset, bytes, ncclUint8, 1 - k, r.comms[k], r.streams[k]));
      }
      NCCL_OK(ncclGroupEnd());
      r.sync();
      for (int k = 0; k < 2; ++k) {
        std::vector<unsigned char> got(bytes + 64);
        CUDA_OK(cudaMemcpy(got.data(), to[k], got.size(), cudaMemcpyDeviceToHost));
        long wrong = 0;
        for (size_t i = 0; i < got.size(); ++i) {
          const bool inside = i >= 64 - offset && i < 64 - offset + bytes;
          const size_t at = i - (64 - offset) + offset;  // (the byte of the sender's buffer)
          const unsigned char want = inside ? static_cast<unsigned char>(at * 11 + at / 1021 + (1 - k)) : 0xee;
          wrong += got[i] != want;
        }
        EXPECT(wrong == 0, "send/recv parts: rank %d, %zu bytes at offset %zu: %ld bytes wrong", k, bytes, offset, wrong);
        CUDA_OK(cudaFree(from[k]));
        CUDA_OK(cudaFree(to[k]));
      }
    }
  }
}

void testThreads() {
  for (int n : {2, 3, 4})
    for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(1000), (size_t(1) << 20) + 3}) collectives(n, count, "threads");
  peerParts();
}

/// In a child with NCCL_ALGO/NCCL_PROTO set: AllReduce on 4 ranks of device 0 at a few counts,
/// exact; a filter that leaves AllReduce no candidate must be refused with ncclInvalidUsage.
void algorithmCase(const std::string& label) {
  for (size_t count : {size_t(1), size_t(1000), size_t(300000)}) {
    Ranks r(4);
    std::vector<Buffer*> send, recv;
    for (int k = 0; k < 4; ++k) {
      send.push_back(new Buffer(count * 4));
      recv.push_back(new Buffer(count * 4));
      for (size_t i = 0; i < count * 4; ++i) send[k]->host[i] = input(k, i);
      send[k]->upload();
    }
    ncclGroupStart();
    ncclResult_t res = ncclSuccess;
    for (int k = 0; k < 4 && res == ncclSuccess; ++k)
      res = ncclAllReduce(send[k]->device, recv[k]->device, count, ncclFloat, ncclSum, r.comms[k], r.streams[k]);
    const ncclResult_t end = ncclGroupEnd();
    if (res == ncclSuccess && end == ncclSuccess) {
      r.sync();
      for (int k = 0; k < 4; ++k) {
        recv[k]->download();
        long wrong = 0;
        for (size_t i = 0; i < count; ++i) {
          float sum = 0;
          for (int j = 0; j < 4; ++j) sum += input(j, i);
          wrong += recv[k]->host[i] != sum;
        }
        EXPECT(wrong == 0, "AllReduce %s count %zu rank %d: %ld wrong", label.c_str(), count, k, wrong);
      }
    } else {
      EXPECT(res == ncclInvalidUsage || end == ncclInvalidUsage, "AllReduce %s count %zu: %s", label.c_str(), count,
             ncclGetLastError(nullptr));
    }
    for (auto* b : send) delete b;
    for (auto* b : recv) delete b;
  }
}

/// Each algorithm and protocol forced through NCCL_ALGO/NCCL_PROTO on 4 ranks (nodes of 2): one
/// forked process a pair, as Braid reads its parameters once per process (this process has not
/// touched CUDA, so its children may).
void testAlgorithms() {
  const char* algos[] = {"Ring", "Tree", "RecDoubling", "HalvingDoubling", "Binomial", "Direct", "Hier2D"};
  const char* protos[] = {"LL", "LL128", "Simple"};
  for (const char* a : algos) {
    for (const char* p : protos) {
      const pid_t pid = fork();
      if (pid == 0) {
        alarm(60);
        setenv("BRAID_RANKS_PER_NODE", "2", 1);
        setenv("NCCL_ALGO", a, 1);
        setenv("NCCL_PROTO", p, 1);
        algorithmCase(std::string(a) + "/" + p);
        _exit(failures == 0 ? 0 : 1);
      }
      int status = 0;
      waitpid(pid, &status, 0);
      EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "AllReduce %s/%s: the child failed (status %d)", a, p, status);
    }
  }
}

/// Two collectives of one communicator on two streams: the second reads the first's output and
/// must run after it (Braid orders a communicator's work across streams).
void testStreams() {
  Ranks r(2);
  const size_t count = 1 << 20;
  std::vector<cudaStream_t> second(2);
  for (auto& s : second) CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::vector<Buffer*> a, b;
  for (int k = 0; k < 2; ++k) {
    a.push_back(new Buffer(count));
    b.push_back(new Buffer(count));
    for (size_t i = 0; i < count; ++i) a[k]->host[i] = input(k, i);
    a[k]->upload();
  }
  ncclGroupStart();
  for (int k = 0; k < 2; ++k) NCCL_OK(ncclAllReduce(a[k]->device, a[k]->device, count, ncclFloat, ncclSum, r.comms[k], r.streams[k]));
  ncclGroupEnd();
  ncclGroupStart();
  for (int k = 0; k < 2; ++k) NCCL_OK(ncclAllReduce(a[k]->device, b[k]->device, count, ncclFloat, ncclSum, r.comms[k], second[k]));
  ncclGroupEnd();
  for (auto s : second) CUDA_OK(cudaStreamSynchronize(s));
  for (int k = 0; k < 2; ++k) {
    b[k]->download();
    long wrong = 0;
    for (size_t i = 0; i < count; ++i) wrong += b[k]->host[i] != 2 * (input(0, i) + input(1, i));
    EXPECT(wrong == 0, "two streams, rank %d: %ld wrong", k, wrong);
  }
  // A group whose send is on one stream and receive on another: synchronizing only the
  // receive's stream must be enough to read what arrived (the streams are joined).
  for (int k = 0; k < 2; ++k) {
    for (size_t i = 0; i < count; ++i) a[k]->host[i] = input(k + 2, i);
    a[k]->upload();
  }
  ncclGroupStart();
  for (int k = 0; k < 2; ++k) {
    NCCL_OK(ncclSend(a[k]->device, count, ncclFloat, 1 - k, r.comms[k], r.streams[k]));
    NCCL_OK(ncclRecv(b[k]->device, count, ncclFloat, 1 - k, r.comms[k], second[k]));
  }
  NCCL_OK(ncclGroupEnd());
  for (auto s : second) CUDA_OK(cudaStreamSynchronize(s));
  for (int k = 0; k < 2; ++k) {
    b[k]->download();
    long wrong = 0;
    for (size_t i = 0; i < count; ++i) wrong += b[k]->host[i] != input(3 - k, i);
    EXPECT(wrong == 0, "send and receive on two streams, rank %d: %ld wrong", k, wrong);
  }
  r.sync();
  for (auto* x : a) delete x;
  for (auto* x : b) delete x;
  for (auto s : second) cudaStreamDestroy(s);
}

/// One group of several collectives per rank (2 ranks, threads), which Braid enqueues in as
/// few launches as it may: four AllReduces of separate buffers (sizes 1, 1000, 65536 + 3 and
/// 300000 floats, so with different channel counts), an AllGather, and an AllReduce of the
/// first one's output in place, which must see that output whole (it runs in a launch after
/// it). Repeated 3 times, exact.
void testGroups() {
  Ranks r(2);
  const size_t counts[] = {1, 1000, 65536 + 3, 300000};
  std::vector<std::vector<Buffer*>> in(2), out(2);
  for (int k = 0; k < 2; ++k) {
    for (size_t count : counts) {
      in[k].push_back(new Buffer(count));
      out[k].push_back(new Buffer(2 * count));
      for (size_t i = 0; i < count; ++i) in[k].back()->host[i] = input(k, i);
      in[k].back()->upload();
    }
  }
  for (int round = 0; round < 3; ++round) {
    NCCL_OK(ncclGroupStart());
    for (int k = 0; k < 2; ++k) {
      for (size_t j = 0; j < 4; ++j)
        NCCL_OK(ncclAllReduce(in[k][j]->device, out[k][j]->device, counts[j], ncclFloat, ncclSum, r.comms[k], r.streams[k]));
      NCCL_OK(ncclAllGather(in[k][1]->device, in[k][3]->device + 1000, 1000, ncclFloat, r.comms[k], r.streams[k]));
      NCCL_OK(ncclAllReduce(out[k][0]->device, out[k][0]->device, counts[0], ncclFloat, ncclSum, r.comms[k], r.streams[k]));
    }
    NCCL_OK(ncclGroupEnd());
    r.sync();
    for (int k = 0; k < 2; ++k) {
      for (size_t j = 0; j < 4; ++j) {
        out[k][j]->download();
        long wrong = 0;
        for (size_t i = 0; i < counts[j]; ++i) {
          const float sum = input(0, i) + input(1, i);
          wrong += out[k][j]->host[i] != (j == 0 ? 2 * sum : sum);
        }
        EXPECT(wrong == 0, "groups, round %d, rank %d, AllReduce %zu (count %zu): %ld wrong", round, k, j, counts[j], wrong);
      }
      in[k][3]->download();
      long wrong = 0;
      for (size_t i = 0; i < 2000; ++i) wrong += in[k][3]->host[1000 + i] != input(static_cast<int>(i / 1000), i % 1000);
      EXPECT(wrong == 0, "groups, round %d, rank %d, AllGather: %ld wrong", round, k, wrong);
      for (size_t i = 1000; i < 3000; ++i) in[k][3]->host[i] = input(k, i);  // (AllReduce 3's input again)
      in[k][3]->upload();
    }
  }
  for (auto& v : in)
    for (auto* b : v) delete b;
  for (auto& v : out)
    for (auto* b : v) delete b;
}

/// What the backend refuses, with a readable error instead of a hang or a crash.
void testErrors() {
  // Refused before any rank's kernel is launched, so that the ranks can be destroyed normally.
  // stream(r, k): the stream rank k enqueues on.
  auto twoRanks = [](const std::function<cudaStream_t(Ranks&, int)>& stream, const char* expected, const char* what) {
    Ranks r(2);
    Buffer x(16), y(16);
    ncclGroupStart();
    ncclResult_t res = ncclSuccess;
    for (int k = 0; k < 2; ++k) {
      float* b = k == 0 ? x.device : y.device;
      const ncclResult_t one = ncclAllReduce(b, b, 16, ncclFloat, ncclSum, r.comms[k], stream(r, k));
      if (one != ncclSuccess) res = one;
    }
    const ncclResult_t end = ncclGroupEnd();
    EXPECT(res == ncclInvalidUsage || end == ncclInvalidUsage, "%s: %s", what, ncclGetLastError(nullptr));
    EXPECT(std::strstr(ncclGetLastError(nullptr), expected) != nullptr, "%s: the message: %s", what,
           ncclGetLastError(nullptr));
  };
  cudaStream_t shared;
  CUDA_OK(cudaStreamCreateWithFlags(&shared, cudaStreamNonBlocking));
  twoRanks([&](Ranks&, int) { return shared; }, "same stream", "two ranks of one device on one stream");
  twoRanks([](Ranks& r, int k) { return k == 0 ? nullptr : r.streams[k]; }, "legacy default stream",
           "a rank on the legacy stream");
  cudaStreamDestroy(shared);
  {
    Ranks r(1);
    std::vector<float> pageable(16, 1.0f);
    const ncclResult_t res = ncclAllReduce(pageable.data(), pageable.data(), 16, ncclFloat, ncclSum, r.comms[0], r.streams[0]);
    EXPECT(res == ncclInvalidArgument, "a pageable host buffer: %s", ncclGetErrorString(res));
    EXPECT(std::strstr(ncclGetLastError(nullptr), "pageable host memory") != nullptr, "the message: %s",
           ncclGetLastError(nullptr));
  }
  {
    ncclComm_t comm = nullptr;
    const int missing = deviceCount();
    const ncclResult_t res = ncclCommInitAll(&comm, 1, &missing);
    EXPECT(res != ncclSuccess, "ncclCommInitAll on device %d (absent) succeeded", missing);
    EXPECT(std::strstr(ncclGetLastError(nullptr), "does not exist") != nullptr, "the message: %s", ncclGetLastError(nullptr));
  }
  {  // a group whose streams are not all captured into one graph is refused before anything runs
    Ranks r(1);
    Buffer x(16), y(16);
    cudaStream_t other;
    CUDA_OK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
    CUDA_OK(cudaStreamBeginCapture(r.streams[0], cudaStreamCaptureModeThreadLocal));
    ncclGroupStart();
    ncclAllReduce(x.device, x.device, 16, ncclFloat, ncclSum, r.comms[0], r.streams[0]);
    ncclAllReduce(y.device, y.device, 16, ncclFloat, ncclSum, r.comms[0], other);
    const ncclResult_t res = ncclGroupEnd();
    cudaGraph_t graph = nullptr;
    CUDA_OK(cudaStreamEndCapture(r.streams[0], &graph));
    if (graph != nullptr) cudaGraphDestroy(graph);
    EXPECT(res == ncclInvalidUsage, "a group half captured: %s", ncclGetErrorString(res));
    EXPECT(std::strstr(ncclGetLastError(nullptr), "same CUDA graph") != nullptr, "the message: %s",
           ncclGetLastError(nullptr));
    cudaStreamDestroy(other);
  }
  {  // a capture already invalidated (here by synchronizing the capturing stream) is refused
    Ranks r(1);
    Buffer x(16);
    cudaStream_t s = r.streams[0];
    CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    cudaStreamSynchronize(s);  // (not allowed during a capture: CUDA invalidates it)
    cudaGetLastError();
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    cudaStreamIsCapturing(s, &status);
    const ncclResult_t res = ncclAllReduce(x.device, x.device, 16, ncclFloat, ncclSum, r.comms[0], s);
    cudaGraph_t graph = nullptr;
    cudaStreamEndCapture(s, &graph);
    cudaGetLastError();
    if (graph != nullptr) cudaGraphDestroy(graph);
    if (status == cudaStreamCaptureStatusInvalidated) {
      EXPECT(res == ncclInvalidUsage, "an AllReduce into an invalidated capture: %s", ncclGetErrorString(res));
      EXPECT(std::strstr(ncclGetLastError(nullptr), "invalidated") != nullptr, "the message: %s",
             ncclGetLastError(nullptr));
    } else {
      std::printf("errors: this CUDA did not invalidate the capture (status %d); that case was not checked\n",
                  static_cast<int>(status));
    }
  }
}

/// Each rank's collectives and sends/receives captured into a CUDA graph (2 ranks of device 0,
/// threads; each capture mode) and the graphs replayed 4 times. The graph: an in-place
/// AllReduce of x (doubling it from the second replay on), an AllGather of x into y, and a
/// send of x to the other rank into z; after replay j, x = 2^(j-1) S (S the ranks' input sum), y
/// = [x, x], z = x. Then an uncaptured AllReduce follows the replays (the connections' step
/// counters went on with the graph's), and the graphs are destroyed before the communicators.
void testGraphs() {
  const size_t count = 100003;  // odd, and more than one step of every protocol
  for (cudaStreamCaptureMode mode : {cudaStreamCaptureModeGlobal, cudaStreamCaptureModeThreadLocal,
                                     cudaStreamCaptureModeRelaxed}) {
    Ranks r(2);
    std::vector<Buffer*> x, y, z;
    for (int k = 0; k < 2; ++k) {
      x.push_back(new Buffer(count));
      y.push_back(new Buffer(2 * count));
      z.push_back(new Buffer(count));
      for (size_t i = 0; i < count; ++i) x[k]->host[i] = input(k, i);
      x[k]->upload();
    }
    for (int k = 0; k < 2; ++k) CUDA_OK(cudaStreamBeginCapture(r.streams[k], mode));
    NCCL_OK(ncclGroupStart());
    for (int k = 0; k < 2; ++k)
      NCCL_OK(ncclAllReduce(x[k]->device, x[k]->device, count, ncclFloat, ncclSum, r.comms[k], r.streams[k]));
    NCCL_OK(ncclGroupEnd());
    NCCL_OK(ncclGroupStart());
    for (int k = 0; k < 2; ++k)
      NCCL_OK(ncclAllGather(x[k]->device, y[k]->device, count, ncclFloat, r.comms[k], r.streams[k]));
    NCCL_OK(ncclGroupEnd());
    NCCL_OK(ncclGroupStart());
    for (int k = 0; k < 2; ++k) {
      NCCL_OK(ncclSend(x[k]->device, count, ncclFloat, 1 - k, r.comms[k], r.streams[k]));
      NCCL_OK(ncclRecv(z[k]->device, count, ncclFloat, 1 - k, r.comms[k], r.streams[k]));
    }
    NCCL_OK(ncclGroupEnd());
    std::vector<cudaGraph_t> graphs(2);
    std::vector<cudaGraphExec_t> execs(2);
    for (int k = 0; k < 2; ++k) {
      CUDA_OK(cudaStreamEndCapture(r.streams[k], &graphs[k]));
      CUDA_OK(cudaGraphInstantiate(&execs[k], graphs[k], 0));
    }
    auto check = [&](float scale, bool all, const char* when) {
      for (int k = 0; k < 2; ++k) {
        x[k]->download();
        y[k]->download();
        z[k]->download();
        long wrong = 0;
        for (size_t i = 0; i < count; ++i) {
          const float want = scale * (input(0, i) + input(1, i));
          wrong += x[k]->host[i] != want;
          if (all) wrong += y[k]->host[i] != want || y[k]->host[count + i] != want || z[k]->host[i] != want;
        }
        EXPECT(wrong == 0, "graphs (capture mode %d), %s, rank %d: %ld wrong", static_cast<int>(mode), when, k, wrong);
      }
    };
    for (int replay = 1; replay <= 4; ++replay) {
      for (int k = 0; k < 2; ++k) CUDA_OK(cudaGraphLaunch(execs[k], r.streams[k]));
      r.sync();
      char when[32];
      std::snprintf(when, sizeof when, "replay %d", replay);
      check(static_cast<float>(1 << (replay - 1)), true, when);
    }
    NCCL_OK(ncclGroupStart());
    for (int k = 0; k < 2; ++k)
      NCCL_OK(ncclAllReduce(x[k]->device, x[k]->device, count, ncclFloat, ncclSum, r.comms[k], r.streams[k]));
    NCCL_OK(ncclGroupEnd());
    r.sync();
    check(16.0f, false, "an AllReduce after the replays");
    for (int k = 0; k < 2; ++k) {
      cudaGraphExecDestroy(execs[k]);
      cudaGraphDestroy(graphs[k]);
    }
    for (auto* b : x) delete b;
    for (auto* b : y) delete b;
    for (auto* b : z) delete b;
  }
}

/// ncclMemAlloc hands out device memory on a CUDA communicator's device.
void testMemAlloc() {
  CUDA_OK(cudaSetDevice(0));
  void* p = nullptr;
  NCCL_OK(ncclMemAlloc(&p, 1 << 20));
  cudaPointerAttributes a{};
  CUDA_OK(cudaPointerGetAttributes(&a, p));
  EXPECT(a.type == cudaMemoryTypeDevice, "ncclMemAlloc gave memory of type %d", static_cast<int>(a.type));
  Ranks r(1);
  CUDA_OK(cudaMemset(p, 0, 1 << 20));
  CUDA_OK(cudaStreamSynchronize(cudaStreamLegacy));
  NCCL_OK(ncclAllReduce(p, p, (1 << 20) / 4, ncclFloat, ncclSum, r.comms[0], r.streams[0]));
  r.sync();
  NCCL_OK(ncclMemFree(p));
  // Two ranks (threads) exchange 4 MiB + 4 bytes between registered ncclMemAlloc buffers: the
  // sends go straight into the receivers' buffers (ranks of one process), exact; registration
  // and deregistration bookkeeping (a second deregistration is refused).
  Ranks two(2);
  const size_t count = (size_t(1) << 20) + 1;
  std::vector<void*> in(2), out(2), handles(4);
  for (int k = 0; k < 2; ++k) {
    NCCL_OK(ncclMemAlloc(&in[k], count * sizeof(float)));
    NCCL_OK(ncclMemAlloc(&out[k], count * sizeof(float)));
    NCCL_OK(ncclCommRegister(two.comms[k], in[k], count * sizeof(float), &handles[2 * k]));
    NCCL_OK(ncclCommRegister(two.comms[k], out[k], count * sizeof(float), &handles[2 * k + 1]));
    std::vector<float> host(count);
    for (size_t i = 0; i < count; ++i) host[i] = input(k, i);
    CUDA_OK(cudaMemcpy(in[k], host.data(), count * sizeof(float), cudaMemcpyHostToDevice));
  }
  CUDA_OK(cudaStreamSynchronize(cudaStreamLegacy));
  NCCL_OK(ncclGroupStart());
  for (int k = 0; k < 2; ++k) {
    NCCL_OK(ncclSend(in[k], count, ncclFloat, 1 - k, two.comms[k], two.streams[k]));
    NCCL_OK(ncclRecv(out[k], count, ncclFloat, 1 - k, two.comms[k], two.streams[k]));
  }
  NCCL_OK(ncclGroupEnd());
  two.sync();
  for (int k = 0; k < 2; ++k) {
    std::vector<float> host(count);
    CUDA_OK(cudaMemcpy(host.data(), out[k], count * sizeof(float), cudaMemcpyDeviceToHost));
    long wrong = 0;
    for (size_t i = 0; i < count; ++i) wrong += host[i] != input(1 - k, i);
    EXPECT(wrong == 0, "registered buffers, rank %d: %ld wrong", k, wrong);
  }
  for (int k = 0; k < 2; ++k) {
    NCCL_OK(ncclCommDeregister(two.comms[k], handles[2 * k]));
    NCCL_OK(ncclCommDeregister(two.comms[k], handles[2 * k + 1]));
    EXPECT(ncclCommDeregister(two.comms[k], handles[2 * k]) == ncclInvalidArgument, "a second deregistration: %s",
           ncclGetLastError(nullptr));
    NCCL_OK(ncclMemFree(in[k]));
    NCCL_OK(ncclMemFree(out[k]));
  }
}

/// BRAID_BACKEND=host keeps the host backend on a machine with a GPU (host buffers).
void testHostBackend() {
  setenv("BRAID_BACKEND", "host", 1);
  std::vector<ncclComm_t> comms(2);
  NCCL_OK(ncclCommInitAll(comms.data(), 2, nullptr));
  int device = 0;
  NCCL_OK(ncclCommCuDevice(comms[0], &device));
  EXPECT(device == -1, "the host backend reports CUDA device %d", device);
  std::vector<std::vector<float>> x(2, std::vector<float>(1000, 2.0f));
  ncclGroupStart();
  for (int k = 0; k < 2; ++k) NCCL_OK(ncclAllReduce(x[k].data(), x[k].data(), 1000, ncclFloat, ncclSum, comms[k], nullptr));
  NCCL_OK(ncclGroupEnd());
  EXPECT(x[0][999] == 4.0f && x[1][0] == 4.0f, "host AllReduce gave %g and %g", x[0][999], x[1][0]);
  for (auto c : comms) ncclCommDestroy(c);
  unsetenv("BRAID_BACKEND");
}

/// In a forked child: rank k of n on device 0, with a non-blocking stream of its own.
ncclComm_t childRank(const ncclUniqueId& id, int k, int n, cudaStream_t* s) {
  CUDA_OK(cudaSetDevice(0));
  ncclComm_t comm = nullptr;
  NCCL_OK(ncclCommInitRank(&comm, n, id, k));
  CUDA_OK(cudaStreamCreateWithFlags(s, cudaStreamNonBlocking));
  return comm;
}

/// Waits for the children; returns how many did not exit with 0.
int reap(const std::vector<pid_t>& children) {
  int bad = 0;
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++bad;
  }
  return bad;
}

/// Ranks as processes on the one GPU, forked before this process touches CUDA: AllReduce and
/// a send/recv exchange at a few counts, exact, with the FIFO slots shared as `how` says:
/// "cumem" (the default: cuMem memory passed as a file descriptor), "ipc" (NCCL_CUMEM_ENABLE=0:
/// legacy CUDA IPC handles) or "host" (NCCL_P2P_DISABLE=1: shared host memory).
int processRound(const std::string& how) {
  const int n = 2;
  if (how == "ipc") setenv("NCCL_CUMEM_ENABLE", "0", 1);  // (read at this process's first call)
  if (how == "host") setenv("NCCL_P2P_DISABLE", "1", 1);
  ncclUniqueId id;
  NCCL_OK(ncclGetUniqueId(&id));
  std::vector<pid_t> children;
  for (int k = 0; k < n; ++k) {
    const pid_t pid = fork();
    if (pid != 0) {
      children.push_back(pid);
      continue;
    }
    alarm(50);  // a hung child ends (the parent's own limit is 60 s)
    cudaStream_t s;
    ncclComm_t comm = childRank(id, k, n, &s);
    for (size_t count : {size_t(1), size_t(1000), size_t(1) << 20}) {
      Buffer b(count), got(count);
      for (size_t i = 0; i < count; ++i) b.host[i] = input(k, i);
      b.upload();
      NCCL_OK(ncclGroupStart());
      NCCL_OK(ncclSend(b.device, count, ncclFloat, 1 - k, comm, s));
      NCCL_OK(ncclRecv(got.device, count, ncclFloat, 1 - k, comm, s));
      NCCL_OK(ncclGroupEnd());
      NCCL_OK(ncclAllReduce(b.device, b.device, count, ncclFloat, ncclSum, comm, s));
      CUDA_OK(cudaStreamSynchronize(s));
      b.download();
      got.download();
      long wrong = 0, wrongRecv = 0;
      for (size_t i = 0; i < count; ++i) {
        wrong += b.host[i] != input(0, i) + input(1, i);
        wrongRecv += got.host[i] != input(1 - k, i);
      }
      EXPECT(wrong == 0, "processes (%s), rank %d, count %zu: AllReduce %ld wrong", how.c_str(), k, count, wrong);
      EXPECT(wrongRecv == 0, "processes (%s), rank %d, count %zu: receive %ld wrong", how.c_str(), k, count, wrongRecv);
    }
    ncclCommDestroy(comm);
    _exit(failures == 0 ? 0 : 1);
  }
  return reap(children);
}

/// Two processes exchange ncclMemAlloc buffers whose receiving ends are registered, 6 rounds,
/// exact, then once more after deregistration: the sends go straight into the receivers'
/// buffers once the senders have mapped them, which each child's log (NCCL_DEBUG=INFO, P2P)
/// must say. The children set their own parameters: rank 0 makes the unique id, passed
/// through a pipe, so the parent never calls Braid.
int registeredRound() {
  int channel[2];
  if (pipe(channel) != 0) return 1;
  std::vector<pid_t> children;
  std::vector<std::string> logs;
  for (int k = 0; k < 2; ++k) {
    logs.push_back("/tmp/braid-gpu-registered-" + std::to_string(getpid()) + "-" + std::to_string(k) + ".log");
    const pid_t pid = fork();
    if (pid != 0) {
      children.push_back(pid);
      continue;
    }
    alarm(50);
    setenv("NCCL_DEBUG", "INFO", 1);
    setenv("NCCL_DEBUG_SUBSYS", "P2P", 1);
    setenv("NCCL_DEBUG_FILE", logs[k].c_str(), 1);
    ncclUniqueId id;
    if (k == 0) {
      NCCL_OK(ncclGetUniqueId(&id));
      if (write(channel[1], &id, sizeof id) != static_cast<ssize_t>(sizeof id)) _exit(1);
    } else if (read(channel[0], &id, sizeof id) != static_cast<ssize_t>(sizeof id)) {
      _exit(1);
    }
    cudaStream_t s;
    ncclComm_t comm = childRank(id, k, 2, &s);
    const size_t count = size_t(1) << 20;
    void* in = nullptr;
    void* out = nullptr;
    void* handle = nullptr;
    NCCL_OK(ncclMemAlloc(&in, count * sizeof(float)));
    NCCL_OK(ncclMemAlloc(&out, count * sizeof(float)));
    NCCL_OK(ncclCommRegister(comm, out, count * sizeof(float), &handle));
    std::vector<float> host(count);
    for (int round = 0; round < 7; ++round) {
      if (round == 6) NCCL_OK(ncclCommDeregister(comm, handle));
      for (size_t i = 0; i < count; ++i) host[i] = input(k, i) + static_cast<float>(round);
      CUDA_OK(cudaMemcpy(in, host.data(), count * sizeof(float), cudaMemcpyHostToDevice));
      NCCL_OK(ncclGroupStart());
      NCCL_OK(ncclSend(in, count, ncclFloat, 1 - k, comm, s));
      NCCL_OK(ncclRecv(out, count, ncclFloat, 1 - k, comm, s));
      NCCL_OK(ncclGroupEnd());
      CUDA_OK(cudaStreamSynchronize(s));
      CUDA_OK(cudaMemcpy(host.data(), out, count * sizeof(float), cudaMemcpyDeviceToHost));
      long wrong = 0;
      for (size_t i = 0; i < count; ++i) wrong += host[i] != input(1 - k, i) + static_cast<float>(round);
      EXPECT(wrong == 0, "registered buffers between processes, rank %d, round %d: %ld wrong", k, round, wrong);
    }
    ncclCommDestroy(comm);
    NCCL_OK(ncclMemFree(in));
    NCCL_OK(ncclMemFree(out));
    _exit(failures == 0 ? 0 : 1);
  }
  int bad = reap(children);
  for (int k = 0; k < 2; ++k) {
    std::string text;
    if (FILE* f = std::fopen(logs[k].c_str(), "r")) {
      char line[512];
      while (std::fgets(line, sizeof line, f) != nullptr) text += line;
      std::fclose(f);
    }
    std::remove(logs[k].c_str());
    if (text.find("go straight into its registered buffer") == std::string::npos) {
      std::fprintf(stderr, "registered buffers between processes: rank %d never mapped its peer's buffer; its log:\n%s\n",
                   k, text.c_str());
      ++bad;
    }
  }
  close(channel[0]);
  close(channel[1]);
  return bad;
}

/// processRound with each way of sharing the slots, each in a child of its own (Braid reads
/// its parameters once per process), then registeredRound.
int testProcesses() {
  int bad = registeredRound();
  for (const char* how : {"cumem", "ipc", "host"}) {
    const pid_t pid = fork();
    if (pid == 0) _exit(processRound(how) == 0 && failures == 0 ? 0 : 1);
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "processes sharing FIFO slots by %s failed (status %d)\n", how, status);
      ++bad;
    }
  }
  return bad;
}

/// Polls comm's asynchronous error for up to `seconds`; returns the first one that is not
/// ncclSuccess or ncclInProgress (ncclSuccess when none came).
ncclResult_t awaitAsyncError(ncclComm_t comm, int seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < until) {
    ncclResult_t async = ncclSuccess;
    NCCL_OK(ncclCommGetAsyncError(comm, &async));
    if (async != ncclSuccess && async != ncclInProgress) return async;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return ncclSuccess;
}

/// Runs `body` in a forked child with a time limit; returns whether it exited with 0.
bool inChild(const std::function<void()>& body, int limitSeconds, const char* what) {
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(limitSeconds);
    body();
    _exit(failures == 0 ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  EXPECT(ok, "%s: the child failed (status %d)", what, status);
  return ok;
}

/// Kernels that wait on a peer that never comes end through the abort flag, and the reason is
/// ncclCommGetAsyncError's: (1) NCCL_TIMEOUT=2 and a rank that does not call the second
/// AllReduce (2 ranks, threads): ncclTimeout within 20 s, and the waiting rank's stream
/// drains; (2) a rank's process exits after the first AllReduce (2 processes): the other's
/// second AllReduce fails with ncclRemoteError naming the dead rank, without any timeout set.
int testWatchdog() {
  const size_t count = 1 << 20;
  inChild([&] {
    setenv("NCCL_TIMEOUT", "2", 1);
    Ranks r(2);
    Buffer a(count), b(count);
    ncclGroupStart();
    NCCL_OK(ncclAllReduce(a.device, a.device, count, ncclFloat, ncclSum, r.comms[0], r.streams[0]));
    NCCL_OK(ncclAllReduce(b.device, b.device, count, ncclFloat, ncclSum, r.comms[1], r.streams[1]));
    NCCL_OK(ncclGroupEnd());
    r.sync();
    NCCL_OK(ncclAllReduce(a.device, a.device, count, ncclFloat, ncclSum, r.comms[0], r.streams[0]));  // rank 1 never comes
    const auto start = std::chrono::steady_clock::now();
    const ncclResult_t async = awaitAsyncError(r.comms[0], 20);
    EXPECT(async == ncclTimeout, "NCCL_TIMEOUT: rank 0's asynchronous error is %s: %s", ncclGetErrorString(async),
           ncclGetLastError(r.comms[0]));
    CUDA_OK(cudaStreamSynchronize(r.streams[0]));  // the kernel has ended (aborted), not hung
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("watchdog: NCCL_TIMEOUT=2 ended the waiting kernel after %.1f s\n", s);
    for (auto& c : r.comms) {
      ncclCommAbort(c);
      c = nullptr;
    }
    r.comms.clear();
  }, 40, "NCCL_TIMEOUT with a rank that does not call");
  ncclUniqueId id;
  NCCL_OK(ncclGetUniqueId(&id));
  std::vector<pid_t> children;
  for (int k = 0; k < 2; ++k) {
    const pid_t pid = fork();
    if (pid != 0) {
      children.push_back(pid);
      continue;
    }
    alarm(50);
    cudaStream_t s;
    ncclComm_t comm = childRank(id, k, 2, &s);
    Buffer a(count);
    NCCL_OK(ncclAllReduce(a.device, a.device, count, ncclFloat, ncclSum, comm, s));
    CUDA_OK(cudaStreamSynchronize(s));
    if (k == 1) _exit(0);  // gone, without destroying its communicator
    NCCL_OK(ncclAllReduce(a.device, a.device, count, ncclFloat, ncclSum, comm, s));
    const ncclResult_t async = awaitAsyncError(comm, 30);
    EXPECT(async == ncclRemoteError, "a dead peer: rank 0's asynchronous error is %s", ncclGetErrorString(async));
    EXPECT(std::strstr(ncclGetLastError(comm), "rank 1") != nullptr, "the message: %s", ncclGetLastError(comm));
    CUDA_OK(cudaStreamSynchronize(s));
    ncclCommAbort(comm);
    _exit(failures == 0 ? 0 : 1);
  }
  int bad = 0;
  for (size_t i = 0; i < children.size(); ++i) {  // (in exit order: a zombie would still look alive)
    int status = 0;
    if (waitpid(-1, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) ++bad;
  }
  EXPECT(bad == 0, "a dead peer: %d of the 2 processes failed", bad);
  return failures;
}

/// A child process asks CUDA, so that this one stays free to fork after it.
int probeDevices() {
  const pid_t pid = fork();
  if (pid == 0) _exit(std::min(deviceCount(), 100));
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s one-rank|threads|algorithms|streams|errors|graphs|groups|memalloc|host-backend|processes|watchdog\n", argv[0]);
    return 2;
  }
  const std::string name = argv[1];
  if (probeDevices() == 0) {
    std::printf("skipped: no CUDA device (or no driver) is visible to this process\n");
    return 77;
  }
  setenv("NCCL_SOCKET_IFNAME", "lo", 0);
  // A hang ends the test with Braid's report of what every channel waits for (the kernels keep
  // their channels' state in host memory), rather than with meson's silent timeout.
  setenv("BRAID_DUMP_ON_SIGNAL", "SIGUSR1", 0);
  const int limit = name == "algorithms" ? 150 : 60;
  std::thread([name, limit] {
    std::this_thread::sleep_for(std::chrono::seconds(limit));
    std::fprintf(stderr, "gpu_test %s: still running after %d s; Braid's report follows\n", name.c_str(), limit);
    kill(getpid(), SIGUSR1);
    std::this_thread::sleep_for(std::chrono::seconds(2));
    std::fprintf(stderr, "gpu_test %s: FAILED (hung)\n", name.c_str());
    std::_Exit(1);
  }).detach();
  const auto start = std::chrono::steady_clock::now();
  if (name == "processes") {
    failures += testProcesses();
  } else if (name == "watchdog") {
    testWatchdog();
  } else {
    const std::map<std::string, void (*)()> tests = {
        {"one-rank", testOneRank},   {"threads", testThreads},   {"algorithms", testAlgorithms},
        {"streams", testStreams},    {"errors", testErrors},     {"memalloc", testMemAlloc},
        {"host-backend", testHostBackend}, {"graphs", testGraphs},
        {"groups", testGroups}};
    auto it = tests.find(name);
    if (it == tests.end()) {
      std::fprintf(stderr, "no test named %s\n", name.c_str());
      return 2;
    }
    it->second();
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%s: %s (%.1f s)\n", name.c_str(), failures == 0 ? "passed" : "FAILED", s);
  return failures == 0 ? 0 : 1;
}
