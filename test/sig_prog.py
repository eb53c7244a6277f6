# SPDX-License-Identifier: Apache-2.0
"""A Python program with its own SIGUSR1 handler (signal.signal), run
under libcupool.so over the simulated runtime by test_shim: it allocates
through the runtime's cudaMalloc (as PyTorch does, through the symbol the
preload interposes), caches 24 MiB, installs its handler, touches $READY and
waits for SIGTERM. Prints how often its handler ran and what the simulated
driver still holds."""
import ctypes
import os
import signal
import sys
import time

from sim_stats import driver_used


def main():
    sim = ctypes.CDLL(os.environ["SIM_LIB"])    # the runtime, loaded as a plugin
    rt = ctypes.CDLL(None)                      # cudaMalloc as the program sees it
    blocks = [ctypes.c_void_p() for _ in range(6)]
    for b in blocks:
        assert rt.cudaMalloc(ctypes.byref(b), ctypes.c_size_t(3 << 20)) == 0
    for b in blocks:
        assert rt.cudaFree(b) == 0
    calls = []
    stop = []
    signal.signal(signal.SIGUSR1, lambda s, f: calls.append(s))
    signal.signal(signal.SIGTERM, lambda s, f: stop.append(s))
    assert signal.getsignal(signal.SIGUSR1) is not signal.SIG_DFL
    open(os.environ["READY"], "w").close()
    deadline = time.time() + 20
    while not stop and time.time() < deadline:
        time.sleep(0.01)
    print(f"handler calls: {len(calls)}, driver holds: {driver_used(sim)}")
    sys.stdout.flush()


main()
