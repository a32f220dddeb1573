"""PyTorch on Braid: run under torch.distributed.run with Braid's libnccl.so.2 in LD_PRELOAD,
ranks on one GPU. Checks all_reduce, all_gather, reduce_scatter, broadcast, all_to_all,
send/recv and a few DistributedDataParallel steps against what one process computes alone,
and prints one line per check ("PASS name" / "FAIL name: why") and, on rank 0, a last line
"torch_check: N passed, M failed". Exit status 0 when everything passed.

  LD_PRELOAD=build/libnccl.so.2 python3 -m torch.distributed.run --nproc_per_node=2 perf/torch_check.py
"""
import os
import sys

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_DEVICE", "0")))
    torch.cuda.set_device(device)
    results = []

    def check(name, ok, why=""):
        results.append((name, bool(ok), why))

    def inputs(r, n):  # small integers: every sum is exact in float32
        return (torch.arange(n, device=device, dtype=torch.float32) * 7 + r) % 5

    n = 1 << 20
    x = inputs(rank, n)
    dist.all_reduce(x)
    want = sum(inputs(r, n) for r in range(world))
    check("all_reduce", torch.equal(x, want), "max error %g" % (x - want).abs().max().item())

    x = inputs(rank, n)
    dist.all_reduce(x, op=dist.ReduceOp.AVG)
    check("all_reduce avg", torch.allclose(x, want / world), "max error %g" % (x - want / world).abs().max().item())

    parts = [torch.empty(n, device=device) for _ in range(world)]
    dist.all_gather(parts, inputs(rank, n))
    check("all_gather", all(torch.equal(parts[r], inputs(r, n)) for r in range(world)))

    out = torch.empty(n, device=device)
    dist.reduce_scatter_tensor(out, inputs(rank, n * world))
    want_rs = sum(inputs(r, n * world) for r in range(world))[rank * n:(rank + 1) * n]
    check("reduce_scatter", torch.equal(out, want_rs))

    x = inputs(rank, n)
    dist.broadcast(x, src=world - 1)
    check("broadcast", torch.equal(x, inputs(world - 1, n)))

    send = inputs(rank, n * world)
    recv = torch.empty(n * world, device=device)
    dist.all_to_all_single(recv, send)
    want_a2a = torch.cat([inputs(r, n * world)[rank * n:(rank + 1) * n] for r in range(world)])
    check("all_to_all", torch.equal(recv, want_a2a))

    if world > 1:
        got = torch.empty(n, device=device)
        ops = [dist.P2POp(dist.isend, inputs(rank, n), (rank + 1) % world),
               dist.P2POp(dist.irecv, got, (rank - 1) % world)]
        for req in dist.batch_isend_irecv(ops):
            req.wait()
        check("send/recv", torch.equal(got, inputs((rank - 1) % world, n)))

    # DDP: each rank trains on its share of one batch; the averaged gradients must give the
    # parameters one process gets from the whole batch.
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8)).to(device)
    alone = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8)).to(device)
    alone.load_state_dict(model.state_dict())
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    opt_alone = torch.optim.SGD(alone.parameters(), lr=0.1)
    gen = torch.Generator(device="cpu").manual_seed(1)
    for _ in range(5):
        batch = torch.randn(16 * world, 64, generator=gen).to(device)
        target = torch.randn(16 * world, 8, generator=gen).to(device)
        share = slice(rank * 16, (rank + 1) * 16)
        opt.zero_grad()
        torch.nn.functional.mse_loss(ddp(batch[share]), target[share]).backward()
        opt.step()
        opt_alone.zero_grad()
        torch.nn.functional.mse_loss(alone(batch), target).backward()
        opt_alone.step()
    err = max((a - b).abs().max().item() for a, b in zip(model.parameters(), alone.parameters()))
    check("ddp 5 steps", err < 1e-4, "largest parameter difference %g" % err)

    torch.cuda.synchronize()
    for name, ok, why in results:
        print("rank %d: %s %s%s" % (rank, "PASS" if ok else "FAIL", name, "" if ok else ": " + why), flush=True)
    failed = torch.tensor([sum(not ok for _, ok, _ in results)], device=device, dtype=torch.float32)
    dist.all_reduce(failed)
    if rank == 0:
        total = len(results) * world
        print("torch_check: %d passed, %d failed" % (total - int(failed.item()), int(failed.item())), flush=True)
    dist.destroy_process_group()
    return 0 if failed.item() == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
