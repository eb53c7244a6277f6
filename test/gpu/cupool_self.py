# SPDX-License-Identifier: Apache-2.0
"""The statistics of the calling process, from cupool itself: when running
under cupool with CUPOOL_STATS_FILE and CUPOOL_STATS_FORMAT=json set, send
ourselves the statistics signal and read the line it writes. And the device
memory in use as the driver counts it (NVML), which holds everything the
process has on the device: PyTorch's or cupool's segments, and what NCCL
and the libraries allocate for themselves, which PyTorch's own figures
leave out (under cupool, NCCL's cudaMalloc calls are served from the pool,
so cupool's reserved holds them)."""
import ctypes
import json
import os
import signal
import time


def own_stats():
    """The JSON statistics object, or None when not under cupool."""
    path = os.environ.get("CUPOOL_STATS_FILE")
    if not path or "libcupool" not in os.environ.get("LD_PRELOAD", ""):
        return None
    path = path.replace("%p", str(os.getpid()))

    def lines():
        """The complete lines written so far (a dump is one line)."""
        try:
            text = open(path).read()
        except OSError:
            return []
        return text[:text.rfind("\n") + 1].splitlines()

    had = len(lines())
    os.kill(os.getpid(), signal.SIGUSR2)
    for _ in range(300):  # a new line: this dump, not an earlier one
        if len(lines()) > had:
            return json.loads(lines()[-1])
        time.sleep(0.01)
    raise RuntimeError(f"cupool wrote no statistics to {path} within 3 s of SIGUSR2")


class _Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                ("used", ctypes.c_ulonglong)]


def device_used():
    """Bytes in use on the current CUDA device, all processes, as NVML
    says; None without NVML. The machine's GPUs are this job's alone."""
    import torch
    try:
        nv = ctypes.CDLL("libnvidia-ml.so.1")
        if nv.nvmlInit_v2() != 0:
            return None
        prop = torch.cuda.get_device_properties(torch.cuda.current_device())
        bus = f"{prop.pci_domain_id:08x}:{prop.pci_bus_id:02x}:{prop.pci_device_id:02x}.0"
        h = ctypes.c_void_p()
        mem = _Memory()
        if (nv.nvmlDeviceGetHandleByPciBusId_v2(bus.encode(), ctypes.byref(h)) != 0 or
                nv.nvmlDeviceGetMemoryInfo(h, ctypes.byref(mem)) != 0):
            return None
        return mem.used
    except (OSError, AttributeError):
        return None


def device_baseline():
    """The device's memory in use once this process has its context and
    nothing else: call before the first allocation."""
    import torch
    torch.cuda.synchronize()  # creates the context, allocates nothing
    return device_used()


def with_own_stats(out, base=None):
    """out with cupool's figures for device 0 added (peak reserved and
    allocated in MiB, stitches and the fence counts), when running under
    cupool; and, given device_baseline()'s figure, device_mib: what the
    device gained since (nothing is given back in these runs, so it is the
    peak of everything the process allocated, with or without cupool)."""
    now = device_used() if base is not None else None
    if now is not None:
        out["device_mib"] = (now - base) >> 20
    stats = own_stats()
    if stats:
        dev = stats["devices"][0]
        out["cupool_peak_reserved_mib"] = dev["reserved_peak"] >> 20
        out["cupool_peak_allocated_mib"] = dev["allocated_peak"] >> 20
        out["cupool_stitches"] = dev.get("stitches", 0)
        out["cupool_fences"] = dev["fences"]
        out["cupool_fences_skipped"] = dev.get("fences_skipped", 0)
        out["cupool_fence_orders"] = dev.get("fence_orders", 0)
        out["cupool_fence_waits"] = dev.get("fence_waits", 0)
        out["cupool_fence_forced"] = dev.get("fence_forced", 0)
        out["cupool_streams_left"] = dev.get("fence_streams_left", 0)
    return out


def snapshot_start():
    """With SNAPSHOT=PATH set, starts recording PyTorch's memory history
    (no stack frames: they would make the snapshot large) and returns PATH,
    for snapshot_dump; else None."""
    import torch
    path = os.environ.get("SNAPSHOT")
    if path:
        torch.cuda.memory._record_memory_history(enabled="all", context=None,
                                                 stacks="python", max_entries=8_000_000)
    return path


def snapshot_dump(path):
    """Writes the history snapshot_start began to path (for `cupool
    import-torch`); nothing if path is None."""
    import torch
    if path:
        torch.cuda.memory._dump_snapshot(path)
