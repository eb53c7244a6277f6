# SPDX-License-Identifier: Apache-2.0
"""torch.cuda of the stand-in (see __init__.py)."""
import ctypes
import threading
import time

_rt = ctypes.CDLL(None)
_initialized = False
_cache = []              # blocks the program freed, kept: (pointer, size)
empty_cache_calls = []   # per call: whether it ran in the main thread
empty_cache_at = []      # per call: time.monotonic() when it ran
current = [0]            # the device set by `with device(d)` (per process)


def init():
    global _initialized
    _initialized = True


def is_initialized():
    return _initialized


def device_count():
    return 1


def cache(size, count):
    """Allocates count blocks of size bytes and frees them into the cache."""
    for _ in range(count):
        p = ctypes.c_void_p()
        assert _rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(size)) == 0
        _cache.append((p, size))


_live = []               # blocks the program holds


def hold(size):
    """A live tensor's block."""
    p = ctypes.c_void_p()
    assert _rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(size)) == 0
    _live.append((p, size))


def memory_allocated(device):
    assert device == 0
    return sum(size for _, size in _live)


def memory_reserved(device):
    assert device == 0
    return sum(size for _, size in _cache) + memory_allocated(device)


def memory_stats(device):
    assert device == 0
    return {"inactive_split_bytes.all.current": 512}


class device:
    """torch.cuda.device(d): d current in the calling thread meanwhile."""

    def __init__(self, d):
        self.d = d

    def __enter__(self):
        current.append(self.d)

    def __exit__(self, *exc):
        current.pop()


def empty_cache():
    empty_cache_calls.append(threading.current_thread() is threading.main_thread())
    empty_cache_at.append(time.monotonic())
    while _cache:
        p, _ = _cache.pop()
        assert _rt.cudaFree(p) == 0


def ipc_collect():
    pass
