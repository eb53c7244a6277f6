"""fw_prog.py MODE: a Python program under libcupool.so over the simulated
runtime, for the framework flush tests of test_shim (the stand-in torch of
test/fw on its path). It touches $READY when its memory is in place and
runs until SIGTERM, then prints what the stand-in saw.

  torch    imports torch, initializes it, caches 18 MiB (6 blocks of 3 MiB)
           in its cache and holds 1 MiB
  blocked  the same, then sleeps 4 s in one C call right after $READY
  none     never imports torch; 12 MiB in cupool's own cache
  fork     as torch, and a forked child that runs Python for 3 s"""
import ctypes
import os
import signal
import sys
import threading
import time

from sim_stats import driver_used

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fw"))
MIB = 1 << 20


def run_python(seconds):
    """Bytecode for a while: the interpreter reaches safe points."""
    end = time.time() + seconds
    while time.time() < end:
        sum(range(100))


def main(mode):
    sim = ctypes.CDLL(os.environ["SIM_LIB"])
    stop = []
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
    open(os.environ["READY"], "w").close()
    if mode == "blocked":
        time.sleep(4)  # one C call: no safe point in it
        run_python(1)
    deadline = time.time() + 20
    while not stop and time.time() < deadline:
        time.sleep(0.01)
    if child:
        os.waitpid(child, 0)
    if "torch" in sys.modules:
        calls = sys.modules["torch"].cuda.empty_cache_calls
        print(f"empty_cache calls: {len(calls)}, in the main thread: {sum(calls)}, "
              f"driver holds: {driver_used(sim)}")
    else:
        print(f"torch imported: False, driver holds: {driver_used(sim)}")
    sys.stdout.flush()


main(sys.argv[1])
