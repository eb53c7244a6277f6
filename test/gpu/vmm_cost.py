# SPDX-License-Identifier: Apache-2.0
"""vmm_cost.py [GIB] - what each VMM step costs the driver for GIB GiB
(default 10) of 2 MiB pieces, as cupool's segments are built, on one
thread: cuMemCreate, cuMemMap, cuMemSetAccess (a call a piece, and one
call for the whole run), cuMemUnmap (a call a piece, and whether one call
may unmap a run of many pieces' mappings), cuMemRelease. Prints one line
per step: seconds and microseconds a piece."""
import ctypes
import sys
import time

cu = ctypes.CDLL("libcuda.so.1")
GIB = int(sys.argv[1]) if len(sys.argv) > 1 else 10
P = 2 << 20
N = (GIB << 30) // P


class Loc(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class Prop(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int),
                ("location", Loc), ("win32HandleMetaData", ctypes.c_void_p),
                ("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class Access(ctypes.Structure):
    _fields_ = [("location", Loc), ("flags", ctypes.c_int)]


def ok(r, what):
    if r != 0:
        raise SystemExit(f"{what} failed: {r}")


ok(cu.cuInit(0), "cuInit")
dev, ctx = ctypes.c_int(), ctypes.c_void_p()
cu.cuDeviceGet(ctypes.byref(dev), 0)
ok(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "retain")
cu.cuCtxSetCurrent(ctx)
prop = Prop(type=1, location=Loc(type=1, id=0))  # pinned, on device 0
acc = Access(location=Loc(type=1, id=0), flags=3)
base = ctypes.c_uint64()
ok(cu.cuMemAddressReserve(ctypes.byref(base), ctypes.c_size_t(N * P), ctypes.c_size_t(0),
                          ctypes.c_uint64(0), ctypes.c_uint64(0)), "reserve")
hs = [ctypes.c_uint64() for _ in range(N)]


def step(name, fn):
    t0 = time.perf_counter()
    fn()
    dt = time.perf_counter() - t0
    print(f"{name}: {dt:.3f} s, {dt / N * 1e6:.1f} us a piece ({GIB} GiB, {N} pieces)", flush=True)


def addr(i):
    return ctypes.c_uint64(base.value + i * P)


def create():
    for h in hs:
        ok(cu.cuMemCreate(ctypes.byref(h), ctypes.c_size_t(P), ctypes.byref(prop),
                          ctypes.c_uint64(0)), "create")


def map_all():
    for i, h in enumerate(hs):
        ok(cu.cuMemMap(addr(i), ctypes.c_size_t(P), ctypes.c_size_t(0), h, ctypes.c_uint64(0)),
           "map")


def access_each():
    for i in range(N):
        ok(cu.cuMemSetAccess(addr(i), ctypes.c_size_t(P), ctypes.byref(acc), ctypes.c_size_t(1)),
           "access")


def access_run():
    ok(cu.cuMemSetAccess(base, ctypes.c_size_t(N * P), ctypes.byref(acc), ctypes.c_size_t(1)),
       "access run")


def unmap_each():
    for i in range(N):
        ok(cu.cuMemUnmap(addr(i), ctypes.c_size_t(P)), "unmap")


def release():
    for h in hs:
        ok(cu.cuMemRelease(h), "release")


step("cuMemCreate", create)
step("cuMemMap", map_all)
step("cuMemSetAccess a piece", access_each)
step("cuMemSetAccess the run", access_run)
step("cuMemUnmap a piece", unmap_each)
map_all()
access_run()
t0 = time.perf_counter()
r = cu.cuMemUnmap(base, ctypes.c_size_t(N * P))
print(f"cuMemUnmap of the whole run in one call: {r} in {time.perf_counter() - t0:.3f} s",
      flush=True)
if r != 0:
    unmap_each()
step("cuMemRelease", release)
