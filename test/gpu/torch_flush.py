# SPDX-License-Identifier: Apache-2.0
"""GPT-2 (124M, Hugging Face transformers, random init) trained STEPS steps
on variable-length batches of about TOKENS tokens, deterministic (so runs
compare loss for loss), with PyTorch's caching allocator on. With FLUSH_AT=K
it pauses after step K: writes $READY (one JSON line: the bytes its tensors
hold, torch.cuda.memory_allocated, and what PyTorch reserves), then runs
Python, reaching safe points, until $GO exists (the flush comes from
outside meanwhile), and trains on. Under DDP (torchrun, RANK set) every
rank pauses at the same step, READY and GO get the rank appended.

With FRACTION_GIB=N, PyTorch's own cap (set_per_process_memory_fraction)
is N GiB. Prints one JSON line: losses, step times (ms), the pause's step,
PyTorch's reserved bytes before and after the pause, and its peaks."""
import json
import os
import random
import time

import torch
import torch.distributed as dist
from transformers import GPT2Config, GPT2LMHeadModel

TOKENS = int(os.environ.get("TOKENS", "16384"))
STEPS = int(os.environ.get("STEPS", "30"))
FLUSH_AT = int(os.environ.get("FLUSH_AT", "-1"))
ddp = "RANK" in os.environ
rank = int(os.environ.get("RANK", "0"))
if ddp:
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")
torch.manual_seed(0)
torch.use_deterministic_algorithms(True)
cfg = GPT2Config(n_layer=int(os.environ.get("LAYERS", "12")))
cfg._attn_implementation = "eager"  # the fused kernels' backward is not deterministic
model = GPT2LMHeadModel(cfg).cuda()
if ddp:
    model = torch.nn.parallel.DistributedDataParallel(model)
if os.environ.get("FRACTION_GIB"):  # PyTorch's own cap, for comparison
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(float(os.environ["FRACTION_GIB"]) * 2**30 / total)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
rng = random.Random(1 + rank)
gen = torch.Generator(device="cpu").manual_seed(2 + rank)
times, losses, pause = [], [], {}
suffix = f".{rank}" if ddp else ""
for step in range(STEPS):
    L = rng.randint(64, 1024)
    B = max(1, TOKENS // L)
    ids = torch.randint(0, 50257, (B, L), generator=gen).cuda()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    loss = model(input_ids=ids, labels=ids).loss
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    losses.append(loss.item())
    torch.cuda.synchronize()
    times.append(round(1000 * (time.perf_counter() - t0), 3))
    if step == FLUSH_AT:
        del loss, ids
        pause = {"step": step, "live": torch.cuda.memory_allocated(),
                 "reserved_before": torch.cuda.memory_reserved(), "pid": os.getpid()}
        with open(os.environ["READY"] + suffix + ".tmp", "w") as f:
            f.write(json.dumps(pause) + "\n")
        os.rename(os.environ["READY"] + suffix + ".tmp", os.environ["READY"] + suffix)
        deadline = time.time() + 60
        while not os.path.exists(os.environ["GO"] + suffix) and time.time() < deadline:
            time.sleep(0.002)  # Python between sleeps: safe points
        pause["reserved_after"] = torch.cuda.memory_reserved()
if ddp:
    dist.destroy_process_group()
print(json.dumps({"rank": rank, "losses": losses, "times": times, "pause": pause,
                  "peak_reserved": torch.cuda.max_memory_reserved(),
                  "peak_allocated": torch.cuda.max_memory_allocated()}))
