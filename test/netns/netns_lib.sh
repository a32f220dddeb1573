# Network namespaces as separate hosts, for the netns suite, test/netns/third_party_plugins.sh and
# perf/net_compare.sh (source it).
#
# netns_setup N (not in a subshell: call it as netns_setup N >file) makes a hub namespace with a bridge and N host namespaces ${NETNS_TAG}n0..,
# each joined to the bridge by a veth pair whose inside end ${NETNS_TAG}aK has the private
# address 198.18.0.(K+1)/24 (RFC 2544's range for network tests; it exists only inside these
# namespaces). netns_cleanup removes them all; callers trap it on EXIT. netns_setup prints why
# and returns 77 when namespaces cannot be made here. run_job runs one job's ranks across them.

NETNS_TAG="bt$(( $$ % 100000 ))"   # interface names must stay under 16 characters

netns_cleanup() {
  local ns
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^${NETNS_TAG}[nh]"); do ip netns del "$ns"; done
  true
}

netns_setup() {
  local n=$1 hub="${NETNS_TAG}hub" k err
  if [ "$(id -u)" != 0 ]; then echo "creating network namespaces needs root"; return 77; fi
  if ! command -v ip >/dev/null; then echo "the ip command (Debian: iproute2) is not installed"; return 77; fi
  if ! err=$(ip netns add "$hub" 2>&1); then echo "cannot create a network namespace: $err"; return 77; fi
  ip -n "$hub" link add br0 type bridge && ip -n "$hub" link set br0 up || return 1
  for k in $(seq 0 $((n - 1))); do
    local ns="${NETNS_TAG}n$k"
    ip netns add "$ns" &&
      ip link add "${NETNS_TAG}a$k" netns "$ns" type veth peer name "${NETNS_TAG}b$k" netns "$hub" &&
      ip -n "$hub" link set "${NETNS_TAG}b$k" master br0 up &&
      ip -n "$ns" addr add "198.18.0.$((k + 1))/24" dev "${NETNS_TAG}a$k" &&
      ip -n "$ns" link set "${NETNS_TAG}a$k" up &&
      ip -n "$ns" link set lo up || return 1
  done
  # The bridge takes a moment before it forwards.
  for k in $(seq 1 $((n - 1))); do
    for _ in $(seq 1 50); do
      ip netns exec "${NETNS_TAG}n0" ping -c1 -W1 "198.18.0.$((k + 1))" >/dev/null 2>&1 && break
      sleep 0.1
    done
  done
}

# netns_env K: the environment of a rank on host K (for env(1)).
netns_env() {
  echo "NCCL_SOCKET_IFNAME=${NETNS_TAG}a$1 NCCL_HOSTID=${NETNS_TAG}host$1"
}

# run_job NRANKS RANKS_PER_HOST TIMEOUT EXTRA_ENV -- COMMAND...: one process per rank, rank r in
# namespace r / RANKS_PER_HOST, with @RANK@ in the command replaced by r. Output of rank r in
# $out/r (the caller's folder), its exit status in $out/r.status; each job takes the next port
# after $port (the caller's) for NCCL_COMM_ID on 198.18.0.1 (host 0). Returns the worst exit status.
run_job() {
  local n=$1 per=$2 limit=$3 extra=$4
  shift 5
  port=$((port + 1))
  local pids=() worst=0
  for r in $(seq 0 $((n - 1))); do
    local k=$((r / per))
    ip netns exec "${NETNS_TAG}n$k" env $(netns_env $k) NCCL_COMM_ID="198.18.0.1:$port" RANK=$r WORLD_SIZE=$n BRAID_BOOTSTRAP_TIMEOUT=30 $extra \
      timeout "$limit" "${@//@RANK@/$r}" >"$out/$r" 2>&1 &
    pids+=($!)
  done
  for r in $(seq 0 $((n - 1))); do
    wait "${pids[$r]}"
    local s=$?
    echo $s >"$out/$r.status"
    [ $s -gt $worst ] && worst=$s
  done
  return $worst
}
