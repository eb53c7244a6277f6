# SPDX-License-Identifier: Apache-2.0
"""turns.py NAME: a job that uses the GPU in turns, idle between them with
PyTorch's cache full, as jobs sharing one GPU do (scripts/gpu-idle). After
START_DELAY seconds (0), TURNS turns (3): each allocates FRACTION (0.58) of
the device's memory in four tensors, multiplies matrices on a slice of
them for WORK_S seconds (2), frees them (PyTorch's cache keeps the
memory) and sleeps IDLE_S seconds (3) in time.sleep. Prints one JSON line:
the turns done, each turn's seconds (from its first allocation, any wait
for memory included, to its free), each turn's wall-clock stamps (asked
for its memory, got it, went idle: time.time()), and the out-of-memory
error if one came (exit 3)."""
import json
import os
import sys
import time

import torch

name = sys.argv[1]
turns = int(os.environ.get("TURNS", "3"))
fraction = float(os.environ.get("FRACTION", "0.58"))
work_s = float(os.environ.get("WORK_S", "2"))
idle_s = float(os.environ.get("IDLE_S", "3"))
cols = 8192
rows = int(fraction * torch.cuda.get_device_properties(0).total_memory) // 4 // (4 * cols)
torch.cuda.init()  # the context before the first turn, not in it
time.sleep(float(os.environ.get("START_DELAY", "0")))
times, stamps, error = [], [], ""
try:
    for _ in range(turns):
        t0, asked = time.perf_counter(), time.time()
        xs = [torch.empty((rows, cols), device="cuda") for _ in range(4)]
        got = time.time()
        for x in xs:
            x.normal_()
        a, b = xs[0][:cols], xs[1][cols:2 * cols]
        t1 = time.perf_counter()
        while time.perf_counter() - t1 < work_s:
            c = torch.tanh(a @ b)
            torch.cuda.synchronize()
        del xs, x, a, b
        c = None
        torch.cuda.synchronize()
        times.append(round(time.perf_counter() - t0, 3))
        stamps.append([asked, got, time.time()])
        time.sleep(idle_s)
except torch.OutOfMemoryError as e:
    error = str(e)[:200]
print(json.dumps({"name": name, "turns": len(times), "times": times, "stamps": stamps,
                  "out_of_memory": bool(error), "error": error}))
sys.exit(3 if error else 0)
