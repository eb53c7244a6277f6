# SPDX-License-Identifier: Apache-2.0
"""ddp_pause.py: DistributedDataParallel over NCCL on a GPT-2 of 6 layers
(Hugging Face transformers, random init, no download), deterministic,
variable-length batches of about TOKENS tokens, STEPS steps (12), run with
torchrun, one rank per GPU. HOLD_GIB more GiB of live bytes per rank (a
tensor filled with its rank's pattern, checked at the end), as weights or
a KV cache would be. With DIR set, after step PAUSE_AT (6) each rank
writes its pid to $DIR/ready.RANK and waits (between steps, in Python) for
$DIR/go: scripts/gpu-nccl-job pauses and resumes the job meanwhile. Rank 0
prints one JSON line: the losses (hex: bit-equal across runs), whether the
held bytes were intact, and the NCCL version loaded."""
import ctypes
import json
import os
import random
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from transformers import GPT2Config, GPT2LMHeadModel

TOKENS = int(os.environ.get("TOKENS", "8192"))
STEPS = int(os.environ.get("STEPS", "12"))
PAUSE_AT = int(os.environ.get("PAUSE_AT", "6"))
HOLD_GIB = float(os.environ.get("HOLD_GIB", "0"))
d = os.environ.get("DIR")


def nccl_version():
    """The NCCL this process loaded (PyTorch's own figure is the one it was
    built with), read from its maps."""
    for line in open("/proc/self/maps"):
        if "libnccl.so" in line:
            v = ctypes.c_int()
            ctypes.CDLL(line.split()[-1]).ncclGetVersion(ctypes.byref(v))
            return v.value
    return None


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(rank)
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    cfg = GPT2Config(n_layer=6)
    cfg._attn_implementation = "eager"  # the fused kernels' backward is not deterministic
    model = DDP(GPT2LMHeadModel(cfg).cuda(), device_ids=[rank])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    held = None
    if HOLD_GIB:
        n = int(HOLD_GIB * (1 << 30)) // 4
        held = torch.arange(n, dtype=torch.int32, device="cuda") ^ (rank + 0x5A5A)
    rng = random.Random(1)
    gen = torch.Generator(device="cpu").manual_seed(2 + rank)
    losses = []
    for step in range(STEPS):
        length = rng.randint(64, 1024)
        ids = torch.randint(0, 50257, (max(1, TOKENS // length), length), generator=gen).cuda()
        loss = model(input_ids=ids, labels=ids).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if d and step == PAUSE_AT:
            torch.cuda.synchronize()
            with open(f"{d}/ready.{rank}.tmp", "w") as f:
                f.write(f"{os.getpid()}\n")
            os.rename(f"{d}/ready.{rank}.tmp", f"{d}/ready.{rank}")
            while not os.path.exists(f"{d}/go"):
                time.sleep(0.01)
    intact = True
    if held is not None:
        n = held.numel()
        intact = bool(torch.equal(held, torch.arange(n, dtype=torch.int32, device="cuda")
                                  ^ (rank + 0x5A5A)))
    bad = torch.tensor([int(not intact)], device="cuda")  # a sum: the build has no min
    dist.all_reduce(bad)
    if rank == 0:
        print(json.dumps({"losses": [float.hex(x) for x in losses], "held_intact": bad.item() == 0,
                          "held_gib": HOLD_GIB, "nccl": nccl_version()}), flush=True)
    dist.destroy_process_group()


main()
