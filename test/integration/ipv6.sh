#!/bin/bash
# Usage: ipv6.sh INTEGRATION_TESTS_BINARY
# Runs the IPv6 case, or skips it (exit 77) where the loopback interface has no ::1.
if ! grep -q "^00000000000000000000000000000001 .* lo$" /proc/net/if_inet6 2>/dev/null; then
  echo "SKIP: the loopback interface has no IPv6 address (::1); the IPv6 case cannot run here"
  exit 77
fi
exec "$1" "[ipv6]"
