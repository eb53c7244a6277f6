# SPDX-License-Identifier: Apache-2.0
"""graph_flush.py: CUDA graphs captured and replayed while flushes come
from outside (scripts/gpu-idle flushes it every 100 ms). A worker thread,
not the main one, for DURATION seconds (20): builds a small model, warms
it up on a side stream, captures its forward step with torch.cuda.graph
(the step's allocations inside the capture, the default capture mode),
replays it REPLAYS times (5) on fresh inputs and checks each output
against the eager step. Right after each capture it allocates and frees
CHURN_GIB GiB (2), which PyTorch's cache keeps for a flush to release
until the next capture (torch.cuda.graph empties the cache as it starts).
The main thread sleeps meanwhile (time.sleep), and so does a second
thread: a flush reaches the main thread idle, at any point of a capture.
Prints one JSON line: captures tried, succeeded, failed (the first
error), outputs that did not match; exit 1 if any capture failed or
mismatched."""
import json
import os
import threading
import time

import torch

DURATION = float(os.environ.get("DURATION", "20"))
REPLAYS = int(os.environ.get("REPLAYS", "5"))
CHURN_GIB = int(os.environ.get("CHURN_GIB", "2"))
counts = {"tried": 0, "ok": 0, "failed": 0, "mismatches": 0, "replays": 0, "error": ""}


def step_model(d):
    return torch.nn.Sequential(torch.nn.Linear(d, 4 * d, device="cuda"), torch.nn.GELU(),
                               torch.nn.Linear(4 * d, d, device="cuda"),
                               torch.nn.LayerNorm(d, device="cuda"))


def one_capture(d=2048, batch=256):
    model = step_model(d)
    static_x = torch.randn(batch, d, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the capture, as PyTorch asks
        for _ in range(2):
            model(static_x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = model(static_x)
    churn = [torch.empty(1 << 28, device="cuda").fill_(k) for k in range(CHURN_GIB)]
    del churn  # 1 GiB each, left in PyTorch's cache
    bad = 0
    for _ in range(REPLAYS):
        x = torch.randn(batch, d, device="cuda")
        static_x.copy_(x)
        graph.replay()
        bad += not torch.allclose(static_y, model(x), rtol=1e-4, atol=1e-4)
        counts["replays"] += 1
    return bad


def worker():
    end = time.monotonic() + DURATION
    with torch.no_grad():
        while time.monotonic() < end:
            counts["tried"] += 1
            try:
                counts["mismatches"] += one_capture()
                counts["ok"] += 1
            except Exception as e:  # counted, and the next capture tried
                counts["failed"] += 1
                counts["error"] = counts["error"] or f"{type(e).__name__}: {e}"[:300]
            torch.cuda.synchronize()


def guarded():
    try:
        worker()
    except Exception as e:  # outside a capture: the worker ends
        counts["error"] = counts["error"] or f"worker: {type(e).__name__}: {e}"[:300]
        counts["failed"] += 1


torch.cuda.init()  # PyTorch's CUDA started before any flush can come
threading.Thread(target=time.sleep, args=(DURATION + 60,), daemon=True).start()
w = threading.Thread(target=guarded)
w.start()
time.sleep(DURATION)  # idle while the worker captures
w.join()
print(json.dumps(counts))
raise SystemExit(1 if counts["failed"] or counts["mismatches"] or not counts["ok"] else 0)
