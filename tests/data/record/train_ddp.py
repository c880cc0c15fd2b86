"""A DDP training step on gloo that knows nothing of precheck, two ranks of one tiny linear model: run by
torchrun (``python -m torch.distributed.run --nproc_per_node 2 train_ddp.py``: the rank from its environment) or
by itself with a file for the ranks to meet at (``python train_ddp.py FILE``: its ranks started by
``torch.multiprocessing.spawn``, the parent only spawning). Under torchrun, rank 0 first takes a batch from a
DataLoader whose worker, a spawned interpreter, calls torch: that worker is no rank and records nothing."""

import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


class Data(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 1

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.nn.functional.relu(torch.ones(4))


def train(rank: int, world: int, init: str) -> None:
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    torch.manual_seed(rank)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.nn.functional.mse_loss(model(torch.randn(3, 4)), torch.zeros(3, 2)).backward()
    optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    if len(sys.argv) > 1:
        mp.spawn(train, args=(2, f"file://{sys.argv[1]}"), nprocs=2)
    else:
        if os.environ["RANK"] == "0":
            next(iter(torch.utils.data.DataLoader(Data(), num_workers=1, multiprocessing_context="spawn")))
        train(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), "env://")
