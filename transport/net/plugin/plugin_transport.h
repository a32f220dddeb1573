// Ranks on different hosts, through an NCCL net plugin (src/plugin/net_plugin.h): each end
// keeps its own FIFO memory in host memory, registered with the plugin (NCCL_PTR_HOST), and
// the process's proxy thread moves every step the sender's kernel publishes through the
// plugin's isend / irecv.
//
// A step travels as one message on the plugin's comm: its 64-byte record (step, size,
// protocol, the step's signature: netend::FrameHeader), then its payload. Each end's Simple
// slots in host memory are spaced with 64 bytes of room in front of each (ConnHandle::
// simpleStride: the payload capacity stays simpleStepBytes, as along the rest of a ring), so the
// kernel writes a Simple step's payload right behind the place the proxy writes its record, and
// the sender sends both from there with one isend; the receiver posts one irecv per step into
// the same place of its own slots (the step's envelope: the record, then room for the largest
// payload of any protocol), before it knows the step's size or protocol. LL and LL128 lines,
// whose slots have no room in front, are copied behind the record by the sender, and landed
// from there, 8 bytes at a time, flag and data together, by the receiver. Where either end's
// Simple slots are in GPU memory (below; the receiver says so in its descriptor), a Simple step
// is two messages: its record (from and into host memory), then its payload, from and into the
// GPU slot once the record has told the receiver how many bytes. (A step by reference, the
// socket transport's, never comes here.) The receiver knows every size from the record: what a
// plugin's test reports of a size is never needed (many never write it); only one beyond what
// was posted is a fault. Messages on a comm match in the order they were posted, so the receive
// of step s + 1's record follows that of step s's payload. The sender
// frees a slot when the plugin says its message(s) left (test) and the receiver has said (a
// "ready" frame on the control socket, carrying its tail) that it landed, so a rank that ends
// after its last send leaves nothing in the plugin's pipe. Neither end holds more than
// plugin::kNetMaxRequests requests.
//
// Threads and the end: every call on a comm after setup (isend, irecv, test, iflush, deregMr,
// close) is made by the proxy thread; listen, connect and the sender's regMr run on the thread
// that creates the connection with the proxy held (proxy::hold), so setup never runs
// concurrently with the data calls on a device. No comm is closed with a request in flight:
// the receiver keeps a receive posted for its next step's record, and at the end the sender
// completes it with an end record (a kBye record in the next step's place), sent once its
// own communicator ends (NetFifo: finish) or the receiver's does (its goodbye, or on abort a
// "ready" with netend::kReadyEnding). Each end's proxy closes its comm once nothing is in
// flight; the destroying thread waits for that at most 2 s (0.5 s after an abort), after which
// a comm still holding requests is left open (with its memory) rather than closed under them.
//
// Everything else travels over one TCP control socket per connection, as in the socket and
// verbs transports (transport/net/net_end.h): the steps landed, the announcement, fault
// notices, the goodbye, and the end of a peer that dies (a loss that waits while the plugin
// still delivers: an aborting peer says no goodbye, and its last steps may be on their way). Setup: the receiver calls listen and sends the plugin's handle
// with its control address and nonce over the bootstrap channel; the sender calls connect once,
// connects the control socket and says hello, then calls connect until the plugin gives a comm;
// the receiver's proxy calls accept, once the hello is in, until it gives one (on the proxy
// thread). (NCCL calls a setup round's connects before its accepts, and some plugins' accept
// blocks until the connection has come: called before the peer's connect, it would hold the
// proxy thread, and the proxy::hold around this rank's own connect with it.)
//
// Profiling: while the end's trace is armed, each isend of a step, and the irecv of its
// payload, passes the step's phandle (proxy/op_trace.h netParent): a net plugin's NetPlugin
// events then have its ProxyStep as parent. Otherwise, and for the irecv of a record (its step
// has not begun), the phandle is NULL. (The armed test is the one the trace's calls make
// already: the per-step cost does not change.)
//
// GPU memory: with the CUDA backend, when the plugin's device reports NCCL_PTR_CUDA or
// NCCL_PTR_DMABUF and transport/net/gpu_direct.h's decision allows (the GPU-NIC path against the
// device's pciPath, NCCL_NET_GDR_LEVEL, NCCL_NET_GDR_READ), an end keeps its Simple slots in GPU
// memory registered with the plugin: by regMrDmaBuf (a dma-buf of the slots) where the device
// reports NCCL_PTR_DMABUF, the plugin has regMrDmaBuf, NCCL_DMABUF_ENABLE is not 0 and the backend
// can export one; else by regMr with NCCL_PTR_CUDA where it reports that. The plugin then sends
// from and receives into those slots, no host copy in between; records and LL/LL128 steps stay in
// host memory (so a Simple step there is a record, then a payload: see above). A receiver whose
// data needs a flush (before Hopper, C2C, the device's forceFlush, NCCL_NET_FORCE_FLUSH) calls
// iflush on each Simple step with bytes once its receive is done, and publishes tail only after
// the flush is done (test); a plugin without iflush keeps such a receiver's slots in host memory.
// A sender whose regMr of GPU memory fails stages through host memory (said at INFO); a receiver
// cannot, since its kernel already reads the GPU slots when the plugin's comm (which regMr needs)
// is accepted, so there the failure breaks the connection as any failed call does.
//
// Faults: a plugin call that fails, or answers what the interface does not allow (more bytes
// than posted, a record that is not the step due), breaks the connection with an error naming the
// plugin, the call and the peer: ncclRemoteError when the plugin said so, else ncclSystemError.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "transport/fifo.h"
#include "transport/net/gpu_direct.h"

namespace braid::plugin {
class NetSession;
}

namespace braid::transport::netplugin {

struct Settings {
  net::SocketAddress listenAt;       ///< this rank's bootstrap address, for the control socket
  uint64_t commHash = 0;             ///< presented by the sender on the control socket
  int rank = -1;
  std::chrono::seconds timeout{300}; ///< how long either end waits for the other to connect
  const uint32_t* abortFlag = nullptr;
  std::shared_ptr<plugin::NetSession> session;  ///< the communicator's net plugin
  int deviceHint = 0;                ///< which of the plugin's devices (modulo their count)
  std::string port;                  ///< the device the topology chose ("loop1:1": name:port; "": by deviceHint)
  std::string what;                  ///< the connection, for the log ("ring3", "p2p0")
  GpuDirectPolicy gpuDirect;         ///< GPU memory for the Simple slots (transport/net/gpu_direct.h)
};

/// Receiver side: FIFO memory, the plugin's listening comm and a listening control socket,
/// described in `out`.
std::unique_ptr<FifoMemory> createReceiver(const FifoSizes& sizes, const Settings& settings, int peer, Descriptor* out);
/// Sender side: FIFO memory of the receiver's sizes, the plugin's send comm and the control
/// socket. Throws naming the plugin and the peer when it cannot connect.
std::unique_ptr<FifoMemory> connectSender(const Descriptor& d, const Settings& settings, int peer);

}  // namespace braid::transport::netplugin
