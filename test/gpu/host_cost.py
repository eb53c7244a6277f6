# SPDX-License-Identifier: Apache-2.0
"""host_cost.py: what PyTorch's host pays a tensor, in host-bound loops
(the issue "fences at parity on short steps", its goal 4): run natively
(PyTorch's caching allocator) and under `cupool run --torch` (cupool serves
every tensor). Prints one JSON line:
  pair_us   torch.empty of 4 KiB then its free, 20000 times: µs a pair
  step_ms   a tiny MLP (3 layers of 64, batch 8) forward, backward and an
            SGD step, 2000 times: ms a step (dozens of small tensors each)
Medians of 5 rounds after a warm-up."""
import json
import statistics
import time

import torch

dev = torch.device("cuda")


def pairs(n=20000):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        x = torch.empty(1024, device=dev)
        del x
    torch.cuda.synchronize()
    return 1e6 * (time.perf_counter() - t0) / n


model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
                            torch.nn.ReLU(), torch.nn.Linear(64, 1)).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
inp = torch.randn(8, 64, device=dev)


def steps(n=2000):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        loss = model(inp).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    return 1e3 * (time.perf_counter() - t0) / n


pairs(2000), steps(200)
print(json.dumps({"pair_us": round(statistics.median(pairs() for _ in range(5)), 3),
                  "step_ms": round(statistics.median(steps() for _ in range(5)), 4)}))
