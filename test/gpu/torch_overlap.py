# SPDX-License-Identifier: Apache-2.0
"""A one-GPU stand-in for DistributedDataParallel's overlap of compute and
communication. The transformer of transformer.py (fixed length, TOKENS a
step) trains on the default stream; gradient hooks hand the gradients, in
25 MiB buckets as DDP does, to a second (non-blocking) stream as soon as
they are ready, where a kernel runs about as long as a two-GPU all-reduce of
the bucket would (COMM_GBPS, default 100 GB/s) and then rewrites each
gradient. The default stream waits for that stream before the optimizer
step, and the loop logs loss.item() once a step. With COMM=nccl the second
stream is NCCL's own (one rank, through torch.distributed): each bucket
queues an all-gather whose copy between two persistent buffers lasts as
long as the all-reduce would, and the gradients are rewritten on the
default stream once it has waited for NCCL, as DDP does with its buckets;
NCCL's stream then touches only the buffers it is named. Prints one JSON line:
median step time (steps after the first 10) and peak reserved memory, as
PyTorch sees it or as cupool's statistics say (under cupool, with
CUPOOL_STATS_FILE set). SNAPSHOT=PATH also records PyTorch's memory
history and writes it there (for `cupool import-torch`)."""
import json
import os
import time

import torch
import torch.distributed as dist

from cupool_self import device_baseline, snapshot_dump, snapshot_start, with_own_stats

TOKENS = int(os.environ.get("TOKENS", "8192"))
STEPS = int(os.environ.get("STEPS", "40"))
GBPS = float(os.environ.get("COMM_GBPS", "100"))
BUCKET = 25 << 20
CLOCK_HZ = 1.98e9  # H100/H200 SXM boost clock: torch.cuda._sleep counts cycles

base = device_baseline()
torch.manual_seed(0)
layer = torch.nn.TransformerEncoderLayer(1024, 16, dim_feedforward=4096,
                                         dropout=0.0, batch_first=True)
model = torch.nn.TransformerEncoder(layer, 8, enable_nested_tensor=False).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
params = [p for p in model.parameters() if p.requires_grad]
comm = torch.cuda.Stream()
bucket, bucket_bytes, ready = [], 0, 0
NCCL = os.environ.get("COMM", "sleep") == "nccl"
works, waiting = [], []


def nccl_setup():
    """One rank of NCCL, two persistent copy buffers, and the copy rate."""
    global send, recv, rate
    import tempfile
    store = tempfile.mktemp(prefix="overlap-store-")
    dist.init_process_group("nccl", init_method=f"file://{store}", rank=0, world_size=1)
    send = torch.ones(2 << 30, dtype=torch.uint8, device="cuda")
    recv = torch.empty_like(send)
    for _ in range(3):
        dist.all_gather_into_tensor(recv, send)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(5):
        dist.all_gather_into_tensor(recv, send)
    torch.cuda.synchronize()
    rate = 5 * send.numel() / (time.perf_counter() - t0)


def launch(grads):
    nbytes = sum(g.numel() * g.element_size() for g in grads)
    if NCCL:
        n = min(send.numel(), max(1, int(nbytes / (GBPS * 1e9) * rate)))
        works.append(dist.all_gather_into_tensor(recv[:n], send[:n], async_op=True))
        waiting.extend(grads)
        return
    comm.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(comm):
        torch.cuda._sleep(int(nbytes / (GBPS * 1e9) * CLOCK_HZ))
        for g in grads:
            g.mul_(0.5)  # the all-reduce's average writes the gradient


def finish_comm():
    """DDP's end of backward: wait for the collectives, rewrite the grads."""
    if NCCL:
        for w in works:
            w.wait()
        for g in waiting:
            g.mul_(0.5)
        works.clear()
        waiting.clear()
    else:
        torch.cuda.current_stream().wait_stream(comm)


def hook(p):
    global bucket, bucket_bytes, ready
    bucket.append(p.grad)
    bucket_bytes += p.grad.numel() * p.grad.element_size()
    ready += 1
    if bucket_bytes >= BUCKET or ready == len(params):
        launch(bucket)
        bucket, bucket_bytes = [], 0
    if ready == len(params):
        ready = 0


for p in params:
    p.register_post_accumulate_grad_hook(hook)

snapshot = snapshot_start()
if NCCL:
    nccl_setup()
L = 1024
B = max(1, TOKENS // L)
times = []
for step in range(STEPS):
    x = torch.randn(B, L, 1024, device="cuda")
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    loss = model(x).float().pow(2).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    finish_comm()
    opt.step()
    loss.item()
    torch.cuda.synchronize()
    times.append(time.perf_counter() - t0)
out = {"median_ms": round(1000 * sorted(times[10:])[len(times[10:]) // 2], 2),
       "steps": STEPS, "tokens": TOKENS, "loss": round(loss.item(), 6),
       "torch_peak_reserved_mib": torch.cuda.max_memory_reserved() >> 20}
snapshot_dump(snapshot)
out = with_own_stats(out, base)  # before NCCL gives its buffers back
if NCCL:
    out["copy_gbps"] = round(rate / 1e9, 1)
    dist.destroy_process_group()
print(json.dumps(out))
