# SPDX-License-Identifier: Apache-2.0
"""A stand-in for PyTorch, for test/fw_prog.py: only what cupool's framework
flush touches (torch.cuda.is_initialized, device_count, memory_reserved,
empty_cache, ipc_collect), over the runtime the program sees (cudaMalloc
and cudaFree through the symbols cupool interposes), with a cache of freed
blocks kept as PyTorch's caching allocator keeps them."""
from . import cuda  # noqa: F401  (import torch imports torch.cuda, as PyTorch's does)
