# SPDX-License-Identifier: Apache-2.0
"""fw_prog.py MODE: a Python program under libcupool.so over the simulated
runtime, for the framework flush tests of test_shim (the stand-in torch of
test/fw on its path). It touches $READY when its memory is in place and
runs until SIGTERM, then prints what the stand-in saw.

  torch    imports torch, initializes it, caches 18 MiB (6 blocks of 3 MiB)
           in its cache and holds 1 MiB; its main thread polls (sleeps of
           10 ms)
  sleep, select, poll, socket, lock, event, queue, join, input, asyncio
           the same, its main thread then blocked until SIGTERM in one
           call that lets go of the interpreter's lock: time.sleep,
           select.select and select.poll on a silent pipe, recv on a
           silent socket, acquiring a held lock, waiting on an Event, get
           on an empty Queue, joining a thread that waits, input() on a
           silent pipe, an asyncio loop waiting on a socket
  loop     the same, its main thread in pure Python that never sleeps
  gilheld  the same, its main thread then 8 s in one C call that keeps
           the interpreter's lock (a ctypes.PyDLL call), then polling
  capture  the same, and a thread that holds a CUDA graph capture open
           (global mode) for 1.5 s, $READY written once it is open, then
           ends it: prints
           the capture's end code and whether every empty_cache ran after
           the capture ended
  none     never imports torch; 12 MiB in cupool's own cache
  fork     as torch, and a forked child that runs Python for 3 s
  ending   caches 60 MiB (20 blocks of 3 MiB) and ends; while its
           interpreter finalizes (the cache still held, as PyTorch's is
           until the process goes) it touches $READY and sleeps 2 s"""
import ctypes
import os
import signal
import sys
import threading
import time

from blocking import MODES as BLOCKING_MODES, block
from sim_stats import driver_used

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fw"))
MIB = 1 << 20


def run_python(seconds):
    """Bytecode for a while: the interpreter reaches safe points."""
    end = time.time() + seconds
    while time.time() < end:
        sum(range(100))


class EndSlowly:
    """Touches $READY and sleeps once the interpreter finalizes (its
    module's globals are cleared then): the program is done, the process
    not yet gone."""

    def __init__(self):
        self.ready, self.open, self.sleep = os.environ["READY"], open, time.sleep

    def __del__(self):
        self.open(self.ready, "w").close()
        self.sleep(2)


class Stop(Exception):
    """SIGTERM: ends a blocked main thread's call."""


def stop_now(signum, frame):
    raise Stop()


def hold_capture(rt, result, begun):
    """Holds a global-mode capture open for 5 s on a stream of its own (a
    flush asked meanwhile must find it open, on a loaded machine too); sets
    begun once it is open."""
    s = ctypes.c_void_p()
    assert rt.cudaStreamCreate(ctypes.byref(s)) == 0
    assert rt.cudaStreamBeginCapture(s, 0) == 0  # cudaStreamCaptureModeGlobal
    begun.set()
    time.sleep(5)
    g = ctypes.c_void_p()
    # The time as the capture begins to end: a release after it waited for
    # the capture (cupool may run it before EndCapture returns here).
    ending = time.monotonic()
    result.append(rt.cudaStreamEndCapture(s, ctypes.byref(g)))
    result.append(ending)




def main(mode):
    sim = ctypes.CDLL(os.environ["SIM_LIB"])
    if mode == "ending":
        import torch
        torch.cuda.init()
        torch.cuda.cache(3 * MIB, 20)
        global end_slowly
        end_slowly = EndSlowly()
        return
    stop = []
    if mode in BLOCKING_MODES:
        signal.signal(signal.SIGTERM, stop_now)
    else:
        signal.signal(signal.SIGTERM, lambda s, f: stop.append(s))
    child = None
    if mode == "none":
        rt = ctypes.CDLL(None)
        for _ in range(3):
            p = ctypes.c_void_p()
            assert rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(3 * MIB)) == 0
            assert rt.cudaFree(p) == 0
    else:
        import torch
        torch.cuda.init()
        torch.cuda.cache(3 * MIB, 6)
        torch.cuda.hold(MIB)
        if mode == "fork":
            child = os.fork()
            if child == 0:
                run_python(3)
                print(f"child empty_cache calls: {len(torch.cuda.empty_cache_calls)}")
                sys.stdout.flush()
                os._exit(0)
    captured = []
    if mode == "capture":
        # READY only once the capture is open: a flush asked before it
        # began would find none to wait for (a loaded machine).
        begun = threading.Event()
        holder = threading.Thread(target=hold_capture,
                                  args=(ctypes.CDLL(None), captured, begun))
        holder.start()
        assert begun.wait(60)
    open(os.environ["READY"], "w").close()
    if mode == "gilheld":
        # Keeps the interpreter's lock throughout: 8 s, so that a flush
        # asked late on a loaded machine still finds it held past cupool's
        # 2 s wait for the framework (3 s once ended at that wait's edge).
        ctypes.PyDLL(None).sleep(8)
    if mode in BLOCKING_MODES:
        try:
            block(mode)
        except Stop:
            stop.append(signal.SIGTERM)
    deadline = time.time() + 20
    while not stop and time.time() < deadline:
        time.sleep(0.01)
    if child:
        os.waitpid(child, 0)
    if mode == "capture":
        # The capture's end, even when SIGTERM came first (a loaded machine).
        holder.join(60)
    if captured:
        at = sys.modules["torch"].cuda.empty_cache_at
        print(f"capture ended: {captured[0]}, every release after it: "
              f"{all(t > captured[1] for t in at)} ({len(at)})")
    if "torch" in sys.modules:
        calls = sys.modules["torch"].cuda.empty_cache_calls
        print(f"empty_cache calls: {len(calls)}, in the main thread: {sum(calls)}, "
              f"driver holds: {driver_used(sim)}")
    else:
        print(f"torch imported: False, driver holds: {driver_used(sim)}")
    sys.stdout.flush()


main(sys.argv[1])
