#!/usr/bin/env python3
"""Braid's init time and per-rank memory beyond one machine: a model (issue 26).

Every rank on its own CPU, 8 ranks a node, k unique ids (ncclCommInitRankScalable). Per
communicator, wall time of the slowest rank:

  rendezvous  = (N/k) * t_reg                  root j serves its N/k ranks one after another
              + (N/k) * N*A / bw_root          and sends each the N-address table
              + [k > 1] (k * N*A / bw_root)    root 0 answers the k-1 other roots with it
  peer info   = ceil(log2 N) * t_msg           Bruck's allgather: log2 N rounds, one message each
              + (N-1) * P / bw                 every rank's PeerInfo arrives once
  local       = N * t_peer                     checks and host grouping, linear in N
  first call  = c(N) * t_conn                  connections on first use: c(N) = 2 + log2 N for
                                               the small-message algorithms (ring neighbours,
                                               RecDoubling partners); AlltoAll: N - 1 on at
                                               most 8 ranks (or where NCCL_ALGO names Direct or
                                               Pairwise), else Bruck's 2 log2 N

Memory per rank after init and a small-message warm-up (host backend; FIFOs are backed where
touched, so a connection that carried only small messages costs m_conn):

  memory = m0 + N * (P + A) + c(N) * m_conn     (AlltoAll: + a(N) * m_conn, a(N) = N - 1 up
                                                to 8 ranks, 2 log2 N beyond)

Constants: A = 28 B (a packed address) and P = 88 B (PeerInfo) are the structs' sizes; m0,
m_conn, t_reg and t_msg were fitted to this 2-CPU machine's runs (perf/scale.sh,
perf/memory.sh: after init 75-110 KiB a rank at 8-256 ranks; 8-byte warm-up growth of about
16 KiB per connection end); t_peer, t_conn, bw and bw_root are assumptions for a datacenter
network (10 Gb/s of bootstrap bandwidth, a TCP connect and message in 50 us). Change them
with --name=value.

Usage: perf/scale_model.py [--t_msg=5e-5 ...]
"""
import math
import sys

C = {
    "A": 28, "P": 88,
    "t_reg": 20e-6, "t_msg": 50e-6, "t_peer": 50e-9, "t_conn": 200e-6,
    "bw": 1.25e9, "bw_root": 1.25e9,
    "m0": 80 * 1024, "m_conn": 16 * 1024,
}


def init_time(n, k):
    rendezvous = (n / k) * C["t_reg"] + (n / k) * n * C["A"] / C["bw_root"]
    if k > 1:
        rendezvous += k * n * C["A"] / C["bw_root"]
    peer_info = math.ceil(math.log2(n)) * C["t_msg"] + (n - 1) * C["P"] / C["bw"]
    local = n * C["t_peer"]
    return rendezvous, peer_info, local


def partners(n):
    return 2 + math.ceil(math.log2(n))


def memory(n, alltoall=False):
    m = C["m0"] + n * (C["P"] + C["A"]) + partners(n) * C["m_conn"]
    if alltoall:  # every peer on at most 8 ranks; beyond, Bruck's partners at distances 2^k both ways
        m += (n - 1 if n <= 8 else 2 * math.ceil(math.log2(n))) * C["m_conn"]
    return m


def main(argv):
    for arg in argv[1:]:
        name, _, value = arg.lstrip("-").partition("=")
        if name not in C:
            sys.exit("unknown constant %s (known: %s)" % (name, ", ".join(sorted(C))))
        C[name] = float(value)
    print("constants: " + ", ".join("%s=%g" % kv for kv in sorted(C.items())))
    print("%7s %5s %12s %12s %12s %12s %12s %11s %11s" % (
        "ranks", "ids", "rendezvous", "peer info", "init (s)", "1 id (s)", "1st call", "mem (KiB)",
        "+AlltoAll"))
    n = 8
    while n <= 65536:
        k = max(1, n // 128)  # one id per 16 nodes of 8
        r, p, l = init_time(n, k)
        r1, p1, l1 = init_time(n, 1)
        print("%7d %5d %12.4f %12.4f %12.4f %12.4f %12.4f %11.0f %11.0f" % (
            n, k, r, p, r + p + l, r1 + p1 + l1, partners(n) * C["t_conn"], memory(n) / 1024,
            memory(n, True) / 1024))
        n *= 2


if __name__ == "__main__":
    main(sys.argv)
