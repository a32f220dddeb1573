// The progress thread of network transports: one per process, started with the first network
// connection and stopped when the last one goes, so a process without network peers has none.
//
// Each pass is one ppoll() over every attached pump's sockets, then each pump moves what it
// can without blocking (a FIFO step into a socket, a socket's bytes into a FIFO slot), reading
// only sockets that are ready. While things move, ppoll does not wait; once a pass moves
// nothing for a while it waits, with a timeout that grows from 20 us to 1 ms the longer the
// proxy stays idle (timer slack 1 us): data from the network wakes it at once, a step a kernel
// publishes is seen within the timeout, and kick() (an operation starting) wakes it at once.
// Where no pump needs the timeout (the one-sided carriers only wait on descriptors: sockets, a
// verbs completion channel) the idle wait has none.
// An idle communicator thus leaves the CPU to the ranks: on machines with few cores a
// spinning proxy would starve them.
// User threads never wait for it: they only read and write FIFO memory.
#pragma once

#include <poll.h>

#include <mutex>
#include <string>
#include <vector>

namespace braid::proxy {

/// One network connection's end, as the proxy thread drives it.
class Pump {
 public:
  virtual ~Pump() = default;
  /// Proxy thread only: appends the sockets this pump waits on (POLLIN unless its reader
  /// waits for a free slot; POLLOUT while a write waits).
  virtual void pollSet(std::vector<pollfd>* fds) = 0;
  /// Proxy thread only, after ppoll: `polled` holds this pump's entries of pollSet with their
  /// revents. Moves what it can without blocking; true when anything moved.
  /// Never throws: a broken connection is reported through the FIFO's fault box.
  virtual bool progress(const pollfd* polled) = 0;
  /// In a forked child, for pumps the parent left behind: release this process's hold on the
  /// sockets without touching the parent's connections, and never move anything again.
  virtual void orphan() = 0;
  /// Proxy thread only: progress threw after all (a bug, or memory ran out): the connection is
  /// dead; say so to the ranks (its fault box) instead of ending the process. The pump is
  /// never progressed again.
  virtual void broke(const std::string& why) { (void)why; }
  /// Proxy thread only, with pollSet: whether this pump must be passed over now and then even
  /// when none of its descriptors is ready (a FIFO step a kernel publishes, a deadline to
  /// check). False for a pump whose every event makes one of its descriptors ready (a socket's
  /// bytes, a completion channel): while no attached pump needs it, an idle proxy sleeps in
  /// ppoll until a descriptor or kick() wakes it, instead of waking every millisecond.
  virtual bool needsPolling() const { return true; }
};

/// Hands `pump` to the progress thread (starting it if needed).
void attach(Pump* pump);
/// Takes `pump` back; on return the thread no longer touches it (and has exited if it was the
/// last one).
void detach(Pump* pump);
/// How many pumps are attached (tests: nothing is left behind).
int attachedCount();
/// Returns once the pass over the pumps in progress (if any) has ended: a pass that starts
/// later sees whatever the caller wrote before.
void waitForPass();
/// CPUs the proxy thread should run on (those near the NIC it serves); the first non-empty
/// hint of the process wins, intersected with the CPUs the process may use. Applied when the
/// thread starts, or at its next pass.
void preferCpus(const std::vector<int>& cpus, const std::string& why);

/// Holds the progress thread between passes for as long as the lock lives: a caller's plugin
/// calls (a net plugin's listen, connect, regMr, or a close the thread could not make) then never
/// run while the thread calls the plugin, as NCCL never sets up a connection concurrently with
/// the data calls on a device. Never call attach, detach or waitForPass while holding it.
std::unique_lock<std::mutex> hold();

/// Wakes the proxy thread from an idle wait: it then passes over its pumps without waiting
/// until they fall quiet again. (An operation over the network starting calls post(),
/// control_events.h, which also counts it for the profiler's ProxyCtrl events.)
void kick();

}  // namespace braid::proxy
