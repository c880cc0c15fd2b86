"""A 2-rank DDP training step on gloo, recorded in each rank with precheck.record (tests/test_ranks.py's step).

``python tests/data/record/ddp_step.py DIR`` spawns two ranks; each wraps a tiny model in DDP (its gradients are
all-reduced by DDP's C++ reducer, which no Python wrapper sees) and calls the collectives a user writes by hand:
all_reduce, all_gather, broadcast, reduce_scatter, reduce, gather, scatter, all_to_all,
all_to_all_single and a send/recv pair of small tensors, all inside ``precheck.record(DIR)``, so
DIR/step0/rank0/ and DIR/step0/rank1/ hold the step's dumps.
"""

import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD = 2


def step(rank: int, out: str, port: str) -> None:
    import precheck

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.manual_seed(1 + rank)
    x, target = torch.randn(2, 4), torch.randn(2, 3)
    with precheck.record(out, task="tensor"):
        loss = torch.nn.functional.mse_loss(model(x), target)
        loss.backward()
        total = loss.detach().clone()
        dist.all_reduce(total)
        gathered = [torch.empty(3) for _ in range(WORLD)]
        dist.all_gather(gathered, torch.arange(3.0) * (rank + 1))
        weights = torch.full((3,), float(rank + 1))
        dist.broadcast(weights, src=0)
        piece = torch.empty(2)
        dist.reduce_scatter(piece, [torch.full((2,), rank + 1.5), torch.full((2,), rank - 0.25)])
        reduced = torch.tensor([0.5 * rank, 1.0 - rank])
        dist.reduce(reduced, dst=1, op=dist.ReduceOp.MAX)
        sent = torch.full((2,), rank + 0.75)
        dist.gather(sent, [torch.empty(2) for _ in range(WORLD)] if rank == 0 else None, dst=0)
        chunk = torch.empty(2)
        dist.scatter(chunk, [torch.full((2,), i + 2.5) for i in range(WORLD)] if rank == 1 else None, src=1)
        swapped = [torch.empty(1) for _ in range(WORLD)]
        dist.all_to_all(swapped, [torch.full((1,), 10.0 * rank + i) for i in range(WORLD)])
        single = torch.empty(2)
        dist.all_to_all_single(single, torch.tensor([4.0 * rank, 4.0 * rank + 1]))
        if rank == 0:
            dist.send(torch.tensor([-1.5, -0.5]), dst=1)
        else:
            dist.recv(torch.empty(2), src=0)
        optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(step, args=(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "29517"), nprocs=WORLD)
