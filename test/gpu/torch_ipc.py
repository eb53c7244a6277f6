# SPDX-License-Identifier: Apache-2.0
"""CUDA tensors shared between processes with torch.multiprocessing: the
consumer reads a tensor the producer sent and writes into it; the producer
sees the write. Under cupool, PyTorch's segment holding the tensor may be a
pooled block inside a cupool segment. Prints "ipc ok <sum seen> <value
after>", "ipc WRONG ..." or "ipc failed: ..." (PyTorch with its caching
allocator off cannot share CUDA tensors, with or without cupool)."""
import torch
import torch.multiprocessing as mp


def consumer(q, out):
    t = q.get()
    out.put(float(t.sum().item()))
    t.add_(1.0)
    torch.cuda.synchronize()
    out.put("done")
    q.get()  # keep the tensor mapped until the producer has looked


def main():
    mp.set_start_method("spawn")
    q, out = mp.Queue(), mp.Queue()
    p = mp.Process(target=consumer, args=(q, out))
    p.start()
    xs = [torch.full((1000 + i,), float(i), device="cuda") for i in range(5)]
    t = xs[3]
    q.put(t)
    try:
        seen = out.get(timeout=60)
        out.get(timeout=60)
    except Exception:  # the consumer never got the tensor: say why
        p.kill()
        print("ipc failed: the tensor was not shared (see the producer's error)")
        return
    torch.cuda.synchronize()
    ok = seen == 3.0 * 1003 and bool((t == 4.0).all()) and bool((xs[2] == 2.0).all())
    q.put(None)
    p.join(timeout=120)
    print("ipc", "ok" if ok and p.exitcode == 0 else "WRONG", seen, float(t[0]))


if __name__ == "__main__":
    main()
