# SPDX-License-Identifier: Apache-2.0
"""pause_hold.py DIR GIB BUSY - holds GIB GiB live in 1 GiB int32 tensors,
each filled with its own number, and 1 GiB freed into PyTorch's cache;
with BUSY=1 a thread adds 1 to a small tensor in a loop (launches all
along, the pause included). Writes DIR/ready, waits for DIR/go, then
checks every tensor and that the busy tensor holds exactly the adds made.
Prints "kept ok" or what differs."""
import os
import sys
import threading
import time

import torch

d, gib, busy = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
ts = []
for i in range(gib):
    t = torch.empty(1 << 28, dtype=torch.int32, device="cuda")
    t.fill_(i + 1)
    ts.append(t)
junk = torch.empty(1 << 28, dtype=torch.int32, device="cuda")
del junk
torch.cuda.synchronize()
stop = False
adds = 0
x = torch.zeros(1 << 20, dtype=torch.int64, device="cuda")


def work():
    global adds
    while not stop:
        x.add_(1)
        adds += 1


th = threading.Thread(target=work)
if busy:
    th.start()
    time.sleep(0.5)
open(d + "/ready", "w").close()
while not os.path.exists(d + "/go"):
    time.sleep(0.01)
stop = True
if busy:
    th.join()
torch.cuda.synchronize()
bad = [i for i, t in enumerate(ts) if not bool((t == i + 1).all().item())]
xs = int(x[0].item())
ok = not bad and xs == adds
print("kept ok" if ok else f"BAD tensors {bad[:5]} adds {adds} counted {xs}",
      f"({gib} GiB, {adds} adds while it ran)")
