# SPDX-License-Identifier: Apache-2.0
"""cupti_lock_probe.py: whether the driver's checkpoint lock
(cuCheckpointProcessLock) takes a process that CUPTI watched once CUPTI
lets it go. A child process makes a context and 64 MiB, subscribes to
CUPTI's driver callbacks; this process tries to lock it then, after the
child's cuptiUnsubscribe, and after its cuptiFinalize (unlocking each time
a lock took); first, before CUPTI, the lock that must take. Prints one line
per step: the driver's answer."""
import ctypes
import glob
import os
import sys
import time

CUPTI = ([p for p in ("/usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13",
                      "/usr/local/cuda/lib64/libcupti.so.13") if os.path.exists(p)] +
         [f for d in sys.path for f in sorted(glob.glob(f"{d}/nvidia/*/lib/libcupti.so*"))] +
         ["libcupti.so.13", "libcupti.so"])


class LockArgs(ctypes.Structure):
    _fields_ = [("timeoutMs", ctypes.c_uint), ("reserved0", ctypes.c_uint),
                ("reserved1", ctypes.c_uint64 * 7)]


class Args(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_uint64 * 8)]


def wait_for(path):
    for _ in range(3000):
        if os.path.exists(path):
            return True
        time.sleep(0.01)
    return False


def child(d):
    cu = ctypes.CDLL("libcuda.so.1")
    assert cu.cuInit(0) == 0
    dev, ctx, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
    cu.cuDeviceGet(ctypes.byref(dev), 0)
    cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)
    cu.cuCtxSetCurrent(ctx)
    assert cu.cuMemAlloc_v2(ctypes.byref(ptr), 64 << 20) == 0
    open(f"{d}/allocated", "w").close()
    wait_for(f"{d}/subscribe")
    cupti = None
    for p in CUPTI:
        try:
            cupti = ctypes.CDLL(p)
            break
        except OSError:
            continue
    CB = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint, ctypes.c_void_p)
    cb = CB(lambda *a: None)
    sub = ctypes.c_void_p()
    r = cupti.cuptiSubscribe(ctypes.byref(sub), cb, None)
    r2 = cupti.cuptiEnableDomain(1, sub, 1)  # CUPTI_CB_DOMAIN_DRIVER_API
    open(f"{d}/subscribed", "w").write(f"{r} {r2} {cupti._name}")
    wait_for(f"{d}/unsubscribe")
    r = cupti.cuptiUnsubscribe(sub)
    open(f"{d}/unsubscribed", "w").write(str(r))
    wait_for(f"{d}/finalize")
    r = cupti.cuptiFinalize()
    open(f"{d}/finalized", "w").write(str(r))
    wait_for(f"{d}/end")
    cu.cuMemFree_v2(ptr)


def main():
    d = sys.argv[1]
    os.makedirs(d, exist_ok=True)
    pid = os.fork()
    if pid == 0:
        child(d)
        os._exit(0)
    cu = ctypes.CDLL("libcuda.so.1")
    cu.cuInit(0)

    def lock(step):
        a = LockArgs(timeoutMs=3000)
        r = cu.cuCheckpointProcessLock(pid, ctypes.byref(a))
        u = cu.cuCheckpointProcessUnlock(pid, ctypes.byref(Args())) if r == 0 else None
        print(f"{step}: lock -> {r}" + (f", unlock -> {u}" if u is not None else ""), flush=True)

    wait_for(f"{d}/allocated")
    lock("before CUPTI")
    open(f"{d}/subscribe", "w").close()
    wait_for(f"{d}/subscribed")
    print("subscribed:", open(f"{d}/subscribed").read(), flush=True)
    lock("CUPTI subscribed")
    open(f"{d}/unsubscribe", "w").close()
    wait_for(f"{d}/unsubscribed")
    lock(f"after cuptiUnsubscribe ({open(f'{d}/unsubscribed').read()})")
    open(f"{d}/finalize", "w").close()
    wait_for(f"{d}/finalized")
    lock(f"after cuptiFinalize ({open(f'{d}/finalized').read()})")
    open(f"{d}/end", "w").close()
    os.waitpid(pid, 0)


main()
