// The progress thread of network transports: one per process, started with the first network
// connection and stopped when the last one goes, so a process without network peers has none.
//
// It loops over the attached pumps, each of which moves what it can without blocking (a FIFO
// step into a socket, a socket's bytes into a FIFO slot) and says whether anything moved. When
// nothing has moved for a few passes it waits in ppoll() on every pump's sockets, with a
// timeout that grows from 20 us to 1 ms the longer it stays idle (with a 1 us timer slack):
// data from the network wakes it at once, a step a kernel publishes is seen within the
// timeout. So a busy communicator sees tens of microseconds per hop, and an idle one leaves
// the CPU to the ranks (on machines with few cores, a spinning proxy would starve them).
// User threads never wait for it: they only read and write FIFO memory.
#pragma once

#include <poll.h>

#include <vector>

namespace braid::proxy {

/// One network connection's end, as the proxy thread drives it.
class Pump {
 public:
  virtual ~Pump() = default;
  /// Proxy thread only. Moves what it can without blocking; true when anything moved.
  /// Never throws: a broken connection is reported through the FIFO's fault box.
  virtual bool progress() = 0;
  /// Proxy thread only: the sockets to wait on when idle (POLLIN; POLLOUT while a write waits).
  virtual void pollSet(std::vector<pollfd>* fds) const = 0;
};

/// Hands `pump` to the progress thread (starting it if needed).
void attach(Pump* pump);
/// Takes `pump` back; on return the thread no longer touches it (and has exited if it was the
/// last one).
void detach(Pump* pump);
/// How many pumps are attached (tests: nothing is left behind).
int attachedCount();

}  // namespace braid::proxy
