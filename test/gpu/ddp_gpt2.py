# SPDX-License-Identifier: Apache-2.0
"""DistributedDataParallel over NCCL on a GPT-2 of LAYERS layers (Hugging
Face transformers, random init: no download; default 6), variable-length
batches of about TOKENS tokens (sequence length drawn from 64..1024 each
step, the same on every rank), AdamW, STEPS steps (default 40). Run with
torchrun, one rank per GPU. Rank 0 prints one JSON line: median step time
(steps after the first 5) and each of those steps' times, the losses (deterministic kernels: they must
match bit for bit between allocators), peak memory (PyTorch's; cupool's when
CUPOOL_STATS_FILE is set) and what the device gained. With STEP_STATS=PATH
each rank also writes PATH.RANK: every step's time and what cupool did in
it (stitches, device synchronizations to unmap, segments reserved and
released, fences), its statistics read between steps outside the timed
part, the ranks brought together again after the read. Short steps:
POSITIONS (1024) sets the model's positions, LENGTHS="128,256,512" cycles
through those lengths instead of drawing them, AUTOCAST=bf16 runs the
forward under bfloat16 autocast (its losses then need not match another
allocator's bit for bit)."""
import json
import os
import random
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from transformers import GPT2Config, GPT2LMHeadModel

from cupool_self import device_baseline, own_stats, with_own_stats

TOKENS = int(os.environ.get("TOKENS", "8192"))
STEPS = int(os.environ.get("STEPS", "40"))
LAYERS = int(os.environ.get("LAYERS", "6"))
STEP_STATS = os.environ.get("STEP_STATS")
POSITIONS = int(os.environ.get("POSITIONS", "1024"))
LENGTHS = [int(x) for x in os.environ.get("LENGTHS", "").split(",") if x]
AUTOCAST = os.environ.get("AUTOCAST") == "bf16"
COUNTS = ("stitches", "vmm_syncs", "driver_allocs", "driver_frees", "fences",
          "fence_waits", "fence_orders", "syncs")


def counts():
    """cupool's counts for this rank's device, or None when not under it."""
    s = own_stats()
    if not s:
        return None
    dev = next((d for d in s["devices"] if d["device"] == torch.cuda.current_device()), None)
    return [dev.get(k, 0) for k in COUNTS] if dev else None


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(rank)
    base = device_baseline()
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    cfg = GPT2Config(n_layer=LAYERS, n_positions=POSITIONS)
    cfg._attn_implementation = "eager"  # the fused kernels' backward is not deterministic
    model = DDP(GPT2LMHeadModel(cfg).cuda(), device_ids=[rank])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    rng = random.Random(1)
    gen = torch.Generator(device="cpu").manual_seed(2 + rank)
    times, losses, steps = [], [], []
    for step in range(STEPS):
        length = LENGTHS[step % len(LENGTHS)] if LENGTHS else rng.randint(64, 1024)
        ids = torch.randint(0, 50257, (max(1, TOKENS // length), length), generator=gen).cuda()
        torch.cuda.synchronize()
        c0 = None
        if STEP_STATS:  # each rank reads at its own pace: start together
            c0 = counts()
            dist.barrier()
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=AUTOCAST):
            loss = model(input_ids=ids, labels=ids).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        if STEP_STATS:
            c1 = counts()
            steps.append([round(1e3 * times[-1], 3), length] +
                         ([b - a for a, b in zip(c0, c1)] if c0 and c1 else []))
    if STEP_STATS:
        with open(f"{STEP_STATS}.{rank}", "w") as f:
            json.dump({"rank": rank, "columns": ["ms", "length", *COUNTS], "steps": steps}, f)
    if rank == 0:
        t = sorted(times[5:])
        out = {"median_ms": round(1e3 * t[len(t) // 2], 3), "steps": STEPS,
               "step_ms": [round(1e3 * x, 3) for x in times[5:]],
               "losses": losses,
               "torch_peak_reserved_mib": torch.cuda.max_memory_reserved() >> 20}
        print(json.dumps(with_own_stats(out, base)))
    dist.destroy_process_group()


main()
