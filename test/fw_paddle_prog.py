# SPDX-License-Identifier: Apache-2.0
"""fw_paddle_prog.py MODE: a Python program under libcupool.so over the
simulated runtime, for test_extension_points.py's framework flush tests
(the stand-ins of test/fw on its path). It touches $READY when its memory
is in place and waits for SIGTERM, then prints what the stand-ins saw.

  paddle   imports paddle: 12 MiB in its cache (4 blocks of 3 MiB), 1 MiB
           held
  all      the same, and torch initialized with 18 MiB in its cache (6
           blocks of 3 MiB) and 1 MiB held, and jax imported"""
import ctypes
import os
import signal
import sys
import time

from sim_stats import driver_used

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fw"))
MIB = 1 << 20


def main(mode):
    sim = ctypes.CDLL(os.environ["SIM_LIB"])
    stop = []
    signal.signal(signal.SIGTERM, lambda s, f: stop.append(s))
    import paddle
    paddle.device.cuda.keep(3 * MIB, 4, MIB)
    if mode == "all":
        import jax  # noqa: F401
        import torch
        torch.cuda.init()
        torch.cuda.cache(3 * MIB, 6)
        torch.cuda.hold(MIB)
    open(os.environ["READY"], "w").close()
    deadline = time.time() + 60
    while not stop and time.time() < deadline:
        time.sleep(0.01)
    calls = paddle.device.cuda.empty_cache_calls
    print(f"paddle empty_cache calls: {len(calls)}, in the main thread: {sum(calls)}, "
          f"its cache keeps {len(paddle.device.cuda.cached)} blocks")
    if mode == "all":
        print(f"torch empty_cache calls: {len(sys.modules['torch'].cuda.empty_cache_calls)}")
    print(f"driver holds: {driver_used(sim)}")


if __name__ == "__main__":
    main(sys.argv[1])
