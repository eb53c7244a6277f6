# SPDX-License-Identifier: Apache-2.0
"""Copies between two GPUs in one process, as a model split over two GPUs
does: tensors made before the first copy between the devices (which has
PyTorch enable peer access) and after it, each way, then a copy whose
source and destination are both still in use. Prints "peer ok" and the
number of bytes compared, or raises. Run natively and under cupool
(with CUPOOL_STITCH or CUPOOL_VMM, the pool's memory is VMM-mapped: each
segment must let the peer reach it)."""
import torch

N = 1 << 24  # 64 MiB of floats
assert torch.cuda.device_count() >= 2, "needs two GPUs"
print("peer access possible:", torch.cuda.can_device_access_peer(0, 1),
      torch.cuda.can_device_access_peer(1, 0))
before0 = torch.arange(N, device="cuda:0", dtype=torch.float32)
before1 = torch.arange(N, device="cuda:1", dtype=torch.float32) * 2
x = before0.to("cuda:1")           # the first copy: peer access enabled here
y = before1.to("cuda:0")
after0 = torch.randn(N, device="cuda:0", generator=torch.Generator("cuda:0").manual_seed(1))
after1 = torch.empty(N, device="cuda:1")
after1.copy_(after0, non_blocking=True)
back = torch.empty(N, device="cuda:0")
back.copy_(after1)
torch.cuda.synchronize(0)
torch.cuda.synchronize(1)
checked = 0
for got, want in ((x, before0), (y, before1), (after1, after0), (back, after0)):
    assert torch.equal(got.cpu(), want.cpu()), "a peer copy differs"
    checked += got.numel() * 4
print(f"peer ok {checked} bytes")
