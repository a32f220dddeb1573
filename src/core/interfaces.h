// Choosing the network interface for out-of-band sockets, and the RDMA ports for the verbs
// transport, the way NCCL does.
//
// NCCL_SOCKET_IFNAME is a comma list of name prefixes; a leading '^' excludes the listed
// ones instead, a leading '=' makes the names exact. NCCL_SOCKET_FAMILY restricts the
// address family (AF_INET or AF_INET6). Without NCCL_SOCKET_IFNAME the order is NCCL's:
// ib* interfaces, then one on NCCL_COMM_ID's subnet, then any but docker*, lo and virbr*,
// then those.
#pragma once

#include <string>
#include <vector>

#include "core/socket.h"

namespace braid::net {

/// One address of one interface.
struct Interface {
  std::string name;
  SocketAddress address;  ///< port 0
};

/// A parsed NCCL_SOCKET_IFNAME.
struct InterfaceFilter {
  bool exclude = false;  ///< leading '^'
  bool exact = false;    ///< leading '='
  std::vector<std::string> names;

  static InterfaceFilter parse(const std::string& text);
  bool matches(const std::string& interfaceName) const;
};

/// A parsed NCCL_IB_HCA: the same list syntax (leading '^' excludes, '=' exact names), and an
/// entry may name one port of a device ("mlx5_0:1"); without a port it means every port.
/// Empty text selects every port.
struct HcaFilter {
  struct Entry {
    std::string device;
    int port = -1;  ///< -1: every port
  };
  bool exclude = false;
  bool exact = false;
  std::vector<Entry> entries;
  std::vector<std::string> problems;  ///< entries that were ignored, and why (for a warning)

  static HcaFilter parse(const std::string& text);
  bool matches(const std::string& device, int port) const;
};

/// What the caller wants: NCCL_SOCKET_IFNAME, NCCL_SOCKET_FAMILY and (optionally) an address
/// whose subnet is preferred (NCCL_COMM_ID's).
struct InterfaceRequest {
  std::string ifname;
  std::string family;  ///< "", "AF_INET" or "AF_INET6"
  SocketAddress preferSubnetOf;
};

/// All up interfaces with an IPv4 or IPv6 address (link-local IPv6 skipped), in kernel order.
/// Throws ncclSystemError with the reason when the kernel cannot list them (EMFILE, say).
std::vector<Interface> listInterfaces();

/// The interfaces `request` allows, best first. `all` is listInterfaces() (injectable for tests).
std::vector<Interface> rankInterfaces(const InterfaceRequest& request, const std::vector<Interface>& all);

/// The best interface for `request`; throws ncclSystemError naming the request when none fits.
Interface chooseInterface(const InterfaceRequest& request);

/// The name of the local interface that holds `address` (the port is ignored); "" when none.
std::string interfaceHolding(const SocketAddress& address);

/// The CPUs of the NUMA node a network interface's device sits on, from sysfs
/// (<sysRoot>/sys/class/net/IF/device/numa_node, then .../node/nodeN/cpulist); empty when the
/// interface has no device (loopback, veth) or the node is unknown.
std::vector<int> cpusNearInterface(const std::string& interfaceName, const std::string& sysRoot = "");
/// The same for an RDMA device (<sysRoot>/sys/class/infiniband/DEV/device/numa_node).
std::vector<int> cpusNearRdmaDevice(const std::string& deviceName, const std::string& sysRoot = "");

/// The family named by NCCL_SOCKET_FAMILY text (AF_UNSPEC for ""); throws on other text.
int parseFamily(const std::string& text);

}  // namespace braid::net
