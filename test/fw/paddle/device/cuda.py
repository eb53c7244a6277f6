# SPDX-License-Identifier: Apache-2.0
"""paddle.device.cuda of the stand-in (see paddle/__init__.py): one
device; its blocks are (pointer, size) pairs."""
import ctypes
import os
import threading

_rt = ctypes.CDLL(None)
cached, live = [], []     # blocks freed into the cache, blocks held
empty_cache_calls = []    # per call: whether it ran in the main thread


def _malloc(size):
    p = ctypes.c_void_p()
    assert _rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(size)) == 0
    return p, size


def keep(size, count, held):
    """count blocks of size bytes freed into the cache, and one of held
    bytes that a tensor holds."""
    cached.extend(_malloc(size) for _ in range(count))
    live.append(_malloc(held))


def device_count():
    return 1


def memory_allocated(device=None):
    assert device in (None, 0)
    return sum(size for _, size in live)


def memory_reserved(device=None):
    return sum(size for _, size in cached) + memory_allocated(device)


def empty_cache():
    empty_cache_calls.append(threading.current_thread() is threading.main_thread())
    if os.environ.get("FAKE_PADDLE_RAISES") == "1":
        raise RuntimeError("the stand-in's empty_cache fails, as asked")
    while cached:
        assert _rt.cudaFree(cached.pop()[0]) == 0
