# SPDX-License-Identifier: Apache-2.0
"""torch.profiler under cupool, in a job that uses NCCL (a one-rank process
group: CUPOOL_CUPTI=auto starts CUPTI at the 8th fence after its first NCCL
call, within the first steps). The profiler
asks for CUPTI; cupool must let it go, so the profiler records the CUDA
kernels it records without cupool, and cupool must fence as without CUPTI
from then on. Prints one JSON line: the CUDA events the profiler recorded,
and cupool's fence figures before and after the profiler started (skipped
fences and streams left out must not grow once CUPTI is the profiler's)."""
import json
import os

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile

from cupool_self import own_stats


def work(streams, n=200):
    """Allocations and frees on the default stream while other streams
    and NCCL's get work: what fences are about."""
    x = torch.randn(1024, 1024, device="cuda")
    for i in range(n):
        y = x @ x
        s = streams[i % len(streams)]
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            z = y * 2
        torch.cuda.current_stream().wait_stream(s)
        dist.all_reduce(z)
        del y, z
    torch.cuda.synchronize()


def fence_figures():
    st = own_stats()
    if not st:
        return None
    d = st["devices"][0]
    return {"fences": d["fences"], "skipped": d.get("fences_skipped", 0),
            "left": d.get("fence_streams_left", 0)}


def main():
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("nccl", rank=0, world_size=1)
    torch.cuda.set_device(0)
    streams = [torch.cuda.Stream() for _ in range(3)]
    work(streams)
    before = fence_figures()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        x = torch.randn(1024, 1024, device="cuda")
        for _ in range(10):
            x = torch.relu(x @ x)
        torch.cuda.synchronize()
    kernels = sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
    mid = fence_figures()
    work(streams)
    after = fence_figures()
    print(json.dumps({"profiler_cuda_events": kernels, "before": before, "profiled": mid,
                      "after": after}))
    dist.destroy_process_group()


main()
