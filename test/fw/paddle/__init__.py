# SPDX-License-Identifier: Apache-2.0
"""A stand-in for PaddlePaddle, for test/fw_paddle_prog.py: only what
cupool's framework flush touches (paddle.device.cuda.device_count,
memory_reserved, memory_allocated, empty_cache), over the runtime the
program sees (cudaMalloc and cudaFree through the symbols cupool
interposes), with a cache of freed blocks kept as Paddle's allocator keeps
them. FAKE_PADDLE_RAISES=1 makes empty_cache raise, releasing nothing."""
from . import device  # noqa: F401  (import paddle imports paddle.device.cuda)
