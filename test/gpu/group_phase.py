# SPDX-License-Identifier: Apache-2.0
"""group_phase.py ME OTHER FIRST: PHASES phases taken in turn with another
process on one GPU (scripts/gpu-group). Each phase holds GIB GiB of tensors
for a few matrix products, then frees them (PyTorch's cache keeps the
memory); after phase n it touches $DIR/ME.n; the first waits for OTHER.n-1
before phase n, the second for OTHER.n. Prints one JSON line (per-phase
seconds); exit 3 on out-of-memory."""
import json
import os
import sys
import time

import torch

me, other, first = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
d, phases, gib = os.environ["DIR"], int(os.environ.get("PHASES", "3")), float(os.environ["GIB"])


def wait(path):
    while not os.path.exists(path):
        time.sleep(0.005)  # Python between sleeps: a flush can run here


torch.cuda.init()
times = []
try:
    for k in range(phases):
        if k > 0 or not first:
            wait(f"{d}/{other}.{k - 1 if first else k}")
        t0 = time.perf_counter()
        n = int(gib * 2**30) // 4 // 8192
        x = torch.empty((n, 8192), device="cuda")  # GIB GiB in one tensor
        x.normal_()
        a = x[:8192]
        for _ in range(10):
            a = torch.tanh(a @ x[8192:16384])
        torch.cuda.synchronize()
        del x, a
        times.append(round(time.perf_counter() - t0, 3))
        open(f"{d}/{me}.{k}", "w").close()
except torch.OutOfMemoryError as e:
    print(json.dumps({"me": me, "oom": True, "phase": len(times), "error": str(e)[:160]}))
    open(f"{d}/{me}.failed", "w").close()
    sys.exit(3)
print(json.dumps({"me": me, "times": times}))
