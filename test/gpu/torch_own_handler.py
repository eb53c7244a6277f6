# SPDX-License-Identifier: Apache-2.0
"""A PyTorch job with its own SIGUSR1 handler (as Lightning's SLURM requeue
installs), run under `cupool run --torch`: it caches GiB (argument 1) in
cupool's pool, installs its handler after cupool's, touches READY (argument
2), and waits for SIGTERM. Prints how often its handler ran. gpu-check then
flushes it with `kill -USR1` (its handler must run once) or with `cupool
flush` (its handler must not run), and reads the bytes returned."""
import os
import signal
import sys
import time

import torch

gib, ready = int(sys.argv[1]), sys.argv[2]
blocks = [torch.empty(256 << 20, dtype=torch.uint8, device="cuda") for _ in range(gib * 4)]
torch.cuda.synchronize()
del blocks                           # cupool keeps the segments cached
calls, stop = [], []
signal.signal(signal.SIGUSR1, lambda s, f: calls.append(s))
signal.signal(signal.SIGTERM, lambda s, f: stop.append(s))
open(ready, "w").close()
deadline = time.time() + 60
while not stop and time.time() < deadline:
    time.sleep(0.02)
print(f"own handler calls: {len(calls)}", flush=True)
