# SPDX-License-Identifier: Apache-2.0
"""A small DistributedDataParallel loop over NCCL (run with torchrun, two
ranks): NCCL's own allocations (cuMemCreate, cuMemMap) go through cupool's
driver entry points. Rank 0 prints one JSON line: median step time, the final loss, and its
peak reserved memory (PyTorch's, and cupool's when CUPOOL_STATS_FILE is
set), and what the device gained. SNAPSHOT=PATH also records PyTorch's
memory history and has rank 0 write it there (for `cupool import-torch`)."""
import json
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from cupool_self import device_baseline, snapshot_dump, snapshot_start, with_own_stats


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(rank)
    base = device_baseline()
    snapshot = snapshot_start()
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(2048, 2048),
                                                      torch.nn.GELU()) for _ in range(8)]).cuda()
    ddp = DDP(model, device_ids=[rank])
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4)
    g = torch.Generator(device="cuda").manual_seed(rank)
    times = []
    for step in range(40):
        b = 1024 + 512 * (step % 4)
        x = torch.randn(b, 2048, device="cuda", generator=g)
        torch.cuda.synchronize()
        t = time.perf_counter()
        loss = ddp(x).pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    lt = loss.detach().clone()
    dist.all_reduce(lt)
    if rank == 0:
        snapshot_dump(snapshot)
    if rank == 0:
        t = sorted(times[5:])
        out = {"ms_per_step": round(1e3 * t[len(t) // 2], 3),
               "loss": float(lt) / dist.get_world_size(),
               "torch_cache": os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING") is None,
               "torch_peak_reserved_mib": torch.cuda.max_memory_reserved() >> 20}
        print(json.dumps(with_own_stats(out, base)))
    dist.destroy_process_group()


main()
