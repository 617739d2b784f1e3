"""A small torch.distributed program in place of a 70B fine-tune: every rank all-reduces.

Started by torchrun (c10d rendezvous at $MASTER_ADDR:$MASTER_PORT) on each node of
the allocation. It uses the gloo backend on CPU, so it runs on the virtual GPU
nodes of a laptop as on real ones; each rank reports the GPUs phalanx gave it.
``--config`` is only printed, with whether the file is there: there is no model here.
"""

from __future__ import annotations

import argparse
import os
import socket

import torch
import torch.distributed as dist


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default=None)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    tensor = torch.tensor([float(rank + 1)])
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    expected = world * (world + 1) / 2
    node = os.environ.get("SLURMD_NODENAME", socket.gethostname())
    print(
        f"rank {rank:2d}/{world} local {os.environ.get('LOCAL_RANK')} on {node} "
        f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')} "
        f"all_reduce={tensor.item():.0f} (expected {expected:.0f})",
        flush=True,
    )
    if rank == 0 and args.config:
        found = "found" if os.path.isfile(args.config) else "not found"
        print(f"config: {args.config} ({found})", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0 if tensor.item() == expected else 1


if __name__ == "__main__":
    raise SystemExit(main())
