# SPDX-License-Identifier: Apache-2.0
"""CuPy under cupool: a workload whose arrays change size every step.

  cupy_work.py bench pool|nopool STEPS   time per step, checksum (JSON)
  cupy_work.py fill READY                pool off: 256 MiB arrays until out
                                         of memory; touch READY, sleep 20 s
  cupy_work.py cache MIB READY           pool off: allocate MIB, free it
                                         (cupool keeps it cached), touch
                                         READY, sleep 20 s
"""
import json
import sys
import time

import cupy as cp


def step(rs, i):
    n = 256 + (i % 7) * 128
    a = rs.standard_normal((n, n), dtype=cp.float32)
    b = a @ a.T
    c = cp.tanh(b) * 0.5 + a.sum(axis=0)
    return float(c.sum())


def ready(path):
    open(path, "w").close()
    sys.stdout.flush()
    time.sleep(20)


def main():
    what = sys.argv[1]
    if what == "bench":
        if sys.argv[2] == "nopool":
            cp.cuda.set_allocator(None)
        steps = int(sys.argv[3])
        rs = cp.random.RandomState(0)
        for i in range(20):
            step(rs, i)
        cp.cuda.Device().synchronize()
        t = time.perf_counter()
        total = 0.0
        for i in range(steps):
            total += step(rs, i)
        cp.cuda.Device().synchronize()
        dt = time.perf_counter() - t
        print(json.dumps({"mode": sys.argv[2], "ms_per_step": 1e3 * dt / steps,
                          "checksum": total}))
    elif what == "fill":
        cp.cuda.set_allocator(None)
        held = []
        try:
            while True:
                held.append(cp.ones(64 << 20, dtype=cp.float32))
        except (cp.cuda.memory.OutOfMemoryError, cp.cuda.runtime.CUDARuntimeError) as e:
            print(f"allocated {len(held)} arrays of 256 MiB, then: {str(e)[:80]}")
        ready(sys.argv[2])
    elif what == "cache":
        cp.cuda.set_allocator(None)
        held = [cp.ones(64 << 20, dtype=cp.float32) for _ in range(int(sys.argv[2]) // 256)]
        cp.cuda.Device().synchronize()
        del held
        ready(sys.argv[3])


main()
