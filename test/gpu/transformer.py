# SPDX-License-Identifier: Apache-2.0
"""Variable-length transformer training (the fragmentation pattern users report): an 8-layer encoder,
d=1024, 16 heads, AdamW, about TOKENS tokens a step with the sequence length
drawn from 8..1024 each step. CAP_FRACTION caps PyTorch's own allocator
(set_per_process_memory_fraction). Prints one JSON line: median step time (steps
after the first 10), and peak reserved memory as PyTorch sees it (native
allocator) or as cupool's statistics say (run under cupool, with
CUPOOL_STATS_FILE set). Exit 3 on out-of-memory, so bisection can tell."""
import json
import os
import random
import time

import torch

from cupool_self import device_baseline, with_own_stats

TOKENS = int(os.environ.get("TOKENS", "16384"))
if os.environ.get("CAP_FRACTION"):  # the native allocator's cap
    torch.cuda.set_per_process_memory_fraction(float(os.environ["CAP_FRACTION"]))
STEPS = int(os.environ.get("STEPS", "60"))
base = device_baseline()
torch.manual_seed(0)
layer = torch.nn.TransformerEncoderLayer(1024, 16, dim_feedforward=4096,
                                         dropout=0.0, batch_first=True)
model = torch.nn.TransformerEncoder(layer, 8, enable_nested_tensor=False).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
rng = random.Random(1)
times = []
try:
    for step in range(STEPS):
        L = rng.randint(8, 1024)
        B = max(1, TOKENS // L)
        x = torch.randn(B, L, 1024, device="cuda")
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = model(x).float().pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
except torch.OutOfMemoryError:
    print(json.dumps({"oom": True, "step": len(times)}))
    raise SystemExit(3)
out = {"median_ms": round(1000 * sorted(times[10:])[len(times[10:]) // 2], 2),
       "steps": STEPS, "tokens": TOKENS,
       "torch_peak_reserved_mib": torch.cuda.max_memory_reserved() >> 20,
       "torch_peak_allocated_mib": torch.cuda.max_memory_allocated() >> 20}
print(json.dumps(with_own_stats(out, base)))
