# SPDX-License-Identifier: Apache-2.0
"""A GPT-2 (124M, Hugging Face transformers, random init: no download)
trained on variable-length batches of about TOKENS tokens (sequence length
drawn from 64..1024 each step), AdamW, STEPS steps, LAYERS layers (12).
Prints one JSON line:
median step time (steps after the first 5), the losses (deterministic
kernels, so they must match bit for bit between allocators), and peak
memory as PyTorch sees it (native allocator) or as cupool's statistics say
(run under cupool, with CUPOOL_STATS_FILE set). Exit 3 on out-of-memory.
CAP_MIB caps PyTorch's own allocator (set_per_process_memory_fraction)
unless cupool caps the process (CUPOOL_MAX_RESERVED)."""
import json
import os
import random
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel

from cupool_self import with_own_stats

TOKENS = int(os.environ.get("TOKENS", "16384"))
STEPS = int(os.environ.get("STEPS", "30"))
CAP_MIB = int(os.environ.get("CAP_MIB", "0"))
if CAP_MIB and not os.environ.get("CUPOOL_MAX_RESERVED"):
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, (CAP_MIB << 20) / total))
torch.manual_seed(0)
torch.use_deterministic_algorithms(True)
cfg = GPT2Config(n_layer=int(os.environ.get("LAYERS", "12")))
cfg._attn_implementation = "eager"  # the fused kernels' backward is not deterministic
model = GPT2LMHeadModel(cfg).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
rng = random.Random(1)
gen = torch.Generator(device="cpu").manual_seed(2)
times, losses = [], []
try:
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
        times.append(time.perf_counter() - t0)
except torch.OutOfMemoryError:
    print(json.dumps({"oom": True, "step": len(times)}))
    raise SystemExit(3)
out = {"median_ms": round(1000 * sorted(times[5:])[len(times[5:]) // 2], 2),
       "steps": STEPS, "tokens": TOKENS, "losses": losses,
       "torch_peak_reserved_mib": torch.cuda.max_memory_reserved() >> 20,
       "torch_peak_allocated_mib": torch.cuda.max_memory_allocated() >> 20}
print(json.dumps(with_own_stats(out)))
