// Ranks on different hosts, over InfiniBand or RoCE: each end keeps its own FIFO memory,
// registered with its device, and the process's proxy thread moves every step the sender's
// kernel publishes into the receiver's memory by RDMA, through one RC queue pair per
// connection.
//
// A step travels as two RDMA writes on the queue pair: its payload straight into the
// receiver's slot (Simple) or into a staging slot (LL, whose lines the receiver's proxy then
// stores 8 bytes at a time, flag and data together, as the socket transport does), then a
// 64-byte record (step, size, protocol, the step's signature) written with an immediate value.
// The immediate's receive completion tells the receiver's proxy that both have landed (an RC
// queue pair places writes in order); it checks the record and publishes tail. The receiver's
// proxy writes its kernel's head back into the sender's credit word by RDMA, and the sender
// writes into a slot only while the credits say it is free. The sender frees its own slot when
// the write's completion says the data has left.
//
// Everything else travels over one TCP control socket per connection, as in the socket
// transport (transport/net/net_end.h): the sender's queue pair in its Hello, the receiver's
// "ready" once its queue pair can receive, the announcement, fault notices, the goodbye, and the
// end of a peer that dies. A failed completion is an error naming the device, the port and the
// peer: ncclRemoteError when the peer or the fabric failed (remote access, retries
// exhausted), ncclSystemError for a local failure.
//
// GPU Direct RDMA: with the CUDA backend, where the GPU and the library can (dma-buf),
// NCCL_DMABUF_ENABLE is not 0 and transport/net/gpu_direct.h's decision allows (the GPU-NIC
// path, NCCL_NET_GDR_READ), an end keeps its Simple slots in GPU memory registered with the NIC
// (ibv_reg_dmabuf_mr): the sender's NIC reads the kernel's data there and the receiver's writes
// it there, no host copy in between. This transport makes no flush, so a receiver does so only
// where received data needs none (Hopper or later, its GPU ordering the NIC's writes, no C2C,
// NCCL_NET_FORCE_FLUSH unset). Otherwise the slots stay in host memory. LL and LL128 steps
// always stage there.
//
// Ports: the active ones NCCL_IB_HCA allows. A connection uses the port the topology chose for
// it (topo::PortPlan) when that port is usable and, for a sender, of the receiver's link
// layer; otherwise connection n of a rank uses port n mod count (ring channel c, or the peer's
// rank for send/recv), the sender a port of the receiver's link layer. NCCL_IB_GID_INDEX,
// NCCL_IB_TC, NCCL_IB_SL, NCCL_IB_TIMEOUT and NCCL_IB_RETRY_CNT set the queue pairs'
// attributes as in NCCL.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "topology/paths.h"
#include "transport/fifo.h"
#include "transport/net/gpu_direct.h"

namespace braid::transport::ib {

struct Settings {
  net::SocketAddress listenAt;       ///< this rank's bootstrap address, for the control socket
  uint64_t commHash = 0;             ///< presented by the sender on the control socket
  int rank = -1;
  std::chrono::seconds timeout{300}; ///< how long the receiver waits for the sender to connect
  const uint32_t* abortFlag = nullptr;
  std::string library = "libibverbs.so.1";  ///< BRAID_IBVERBS_LIBRARY
  std::string hca;                   ///< NCCL_IB_HCA
  int gidIndex = -1;                 ///< NCCL_IB_GID_INDEX (-1: automatic)
  int trafficClass = 0;              ///< NCCL_IB_TC (RoCE: the GRH traffic class)
  int serviceLevel = 0;              ///< NCCL_IB_SL
  int ackTimeout = 20;               ///< NCCL_IB_TIMEOUT: 4.096 us x 2^value
  int retryCount = 7;                ///< NCCL_IB_RETRY_CNT
  int portHint = 0;                  ///< which of the usable ports (modulo their count)
  std::string port;                  ///< the port the topology chose ("mlx5_0:1"; "": by portHint)
  std::string what;                  ///< the connection, for the log ("ring3", "p2p0")
  /// GPU Direct RDMA's knobs (transport/net/gpu_direct.h); its sysRoot also places the ports.
  GpuDirectPolicy gpuDirect;
};

/// Whether the verbs transport can run here: the library loads and a port is usable. `why`
/// says what is missing when not, and `what` names the ports when so.
bool available(const Settings& settings, std::string* why, std::string* what);

/// Receiver side: registered FIFO memory, a queue pair and a listening control socket,
/// described in `out`.
std::unique_ptr<FifoMemory> createReceiver(const FifoSizes& sizes, const Settings& settings, int peer, Descriptor* out);
/// Sender side: registered FIFO memory of the receiver's sizes, a queue pair connected to the
/// receiver's, and the control socket. Throws naming the peer, device and port when it cannot.
std::unique_ptr<FifoMemory> connectSender(const Descriptor& d, const Settings& settings, int peer);

}  // namespace braid::transport::ib
