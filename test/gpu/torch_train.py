# SPDX-License-Identifier: Apache-2.0
"""A small deterministic PyTorch training loop with varying batch sizes.

Prints one JSON line: the losses, and (when run under cupool with
CUPOOL_STATS_FILE set) the shim's statistics after a SIGUSR2 to itself.
The losses must match bit for bit between the native allocator and cupool.
"""
import json
import os
import time

import torch

from cupool_self import own_stats

torch.manual_seed(0)
torch.use_deterministic_algorithms(True)
dev = "cuda"
model = torch.nn.Sequential(
    torch.nn.Linear(512, 2048), torch.nn.GELU(),
    torch.nn.Linear(2048, 2048), torch.nn.GELU(),
    torch.nn.Linear(2048, 10)).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
gen = torch.Generator(device="cpu").manual_seed(1)
losses = []
for step in range(60):
    batch = int(torch.randint(8, 1024, (1,), generator=gen))
    x = torch.randn(batch, 512, generator=gen).to(dev)
    y = torch.randint(0, 10, (batch,), generator=gen).to(dev)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    losses.append(loss.item())
out = {"losses": losses}
stats = own_stats()
if stats:
    out["cupool"] = stats
print(json.dumps(out), flush=True)
# HOLD_READY=path: keep the memory, touch path, and wait 10 s, so that
# cupool stat and nvidia-smi can look at the process from outside.
hold = os.environ.get("HOLD_READY")
if hold:
    open(hold, "w").close()
    time.sleep(10)
