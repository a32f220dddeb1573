#include "transport/descriptor_check.h"

#include <cstring>

#include "transport/net/net_end.h"

namespace braid::transport {

namespace {

std::string sizesText(const FifoSizes& s) {
  return std::to_string(s.simpleStepBytes) + "-byte Simple steps, " + std::to_string(s.llStepLines) +
         " LL lines, " + std::to_string(s.ll128StepLines) + " LL128 lines";
}

bool sameSizes(const FifoSizes& a, const FifoSizes& b) {
  return a.simpleStepBytes == b.simpleStepBytes && a.llStepLines == b.llStepLines &&
         a.ll128StepLines == b.ll128StepLines;
}

/// A network end must listen on the peer's own host address (any port but 0).
std::string checkListen(const Descriptor& d, const DescriptorExpectation& e) {
  net::SocketAddress at;
  try {
    at = net::SocketAddress::unpack(d.listen);
  } catch (const std::exception&) {
  }
  const net::SocketAddress& host = e.peerAddress;
  if (!at.valid() || at.port() == 0 || at.family() != host.family() || at.addressSize() != host.addressSize() ||
      std::memcmp(at.addressBytes(), host.addressBytes(), host.addressSize()) != 0) {
    return "its listening address " + (at.valid() ? at.toString() : std::string("(invalid)")) +
           " is not on its own host " + host.toString();
  }
  return "";
}

/// A segment name of the peer's making: its prefix, then a hex sequence number; `name` is
/// `bytes` long at most, terminated within them.
std::string checkSegmentName(const char* name, size_t bytes, const std::string& prefix, const char* what) {
  if (std::memchr(name, '\0', bytes) == nullptr) return std::string("its ") + what + " name is not terminated";
  const std::string text = name;
  const size_t n = prefix.size();
  const bool sequence = text.size() > n && text.size() <= n + 16 &&
                        text.find_first_not_of("0123456789abcdef", n) == std::string::npos;
  if (text.compare(0, n, prefix) != 0 || !sequence) {
    return std::string("it names ") + what + " '" + text + "', not one of the peer's (" + prefix + "<n>)";
  }
  return "";
}

std::string checkShm(const Descriptor& d, const DescriptorExpectation& e) {
  const std::string name = checkSegmentName(d.shmName, sizeof(d.shmName), e.shmPrefix, "segment");
  if (!name.empty()) return name;
  if (d.dataShared > 1) return "its slot-sharing flag is " + std::to_string(d.dataShared);
  const uint64_t expected = d.dataShared != 0 ? (fifoControlBytes() + 4095) / 4096 * 4096 : e.sizes.bytes();
  if (d.bytes != expected) return "it gives " + std::to_string(d.bytes) + " bytes, not " + std::to_string(expected);
  return "";
}

}  // namespace

std::string checkDescriptor(const Descriptor& d, const DescriptorExpectation& e) {
  switch (d.kind) {
    case Kind::kP2p:
      if (!e.sameProcess) return "it offers in-process memory, but the peer is another process";
      break;
    case Kind::kShm:
      if (!e.sharedMemory) return "it offers shared memory, but the peer does not share this rank's /dev/shm";
      break;
    case Kind::kSocket:
    case Kind::kIb:
    case Kind::kPlugin:
      break;
    default:
      return "its transport kind " + std::to_string(static_cast<unsigned>(d.kind)) + " is unknown";
  }
  if (!sameSizes(d.sizes, e.sizes)) {
    return "its FIFOs have " + sizesText(d.sizes) + " but this rank's have " + sizesText(e.sizes) +
           " (NCCL_BUFFSIZE and the protocol knobs must be the same on every rank)";
  }
  if (d.kind == Kind::kShm) return checkShm(d, e);
  if (d.bytes != e.sizes.bytes()) {
    return "it gives " + std::to_string(d.bytes) + " bytes, not " + std::to_string(e.sizes.bytes());
  }
  if (d.kind == Kind::kSocket && (d.nSockets < 1 || d.nSockets > static_cast<uint32_t>(netend::kMaxSockets))) {
    return "it asks for " + std::to_string(d.nSockets) + " sockets (1 to " + std::to_string(netend::kMaxSockets) + ")";
  }
  if ((d.kind == Kind::kIb || d.kind == Kind::kPlugin) && d.nSockets != 1) {
    return "it asks for " + std::to_string(d.nSockets) + " control sockets";
  }
  if (d.kind == Kind::kSocket || d.kind == Kind::kIb || d.kind == Kind::kPlugin) return checkListen(d, e);
  return "";
}

std::string checkAcknowledgement(const Acknowledgement& a, const DescriptorExpectation& e, Kind kind, bool dataShared) {
  if (a.magic != kAcknowledgementMagic) return "it is not an acknowledgement (magic " + std::to_string(a.magic) + ")";
  if (a.rank != e.peer) return "it says it comes from rank " + std::to_string(a.rank);
  if (kind != Kind::kShm) {
    if (a.credit != kCreditNone) return "it offers a credit line (kind " + std::to_string(a.credit) + ") to a connection that takes none";
    return "";
  }
  if (a.credit == kCreditDevice) {
    return dataShared ? "" : "it offers a credit line in GPU memory, but this rank's FIFO slots are in host memory";
  }
  if (a.credit != kCreditSegment) return "its credit line is of kind " + std::to_string(a.credit) + ", not 1 or 2";
  return checkSegmentName(a.creditName, sizeof(a.creditName), e.shmPrefix, "credit segment");
}

}  // namespace braid::transport
