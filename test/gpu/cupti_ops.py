# SPDX-License-Identifier: Apache-2.0
# cupti_ops.py OP N - N iterations of one PyTorch operation whose kernels
# come from one library: matmul (cuBLAS), conv (cuDNN), relu (PyTorch's own).
# Run under test/gpu/cupti_count.c: N = 100 must count at least 100 launches
# more than N = 0.
import sys
import torch

op = sys.argv[1]
x = torch.randn(512, 512, device="cuda")
im = torch.randn(4, 3, 32, 32, device="cuda")
conv = torch.nn.Conv2d(3, 8, 3).cuda()
torch.cuda.synchronize()
for _ in range(int(sys.argv[2])):
    if op == "matmul":
        y = x @ x
    elif op == "conv":
        y = conv(im)
    elif op == "relu":
        y = torch.relu(x)
    else:
        sys.exit(f"unknown op {op}")
torch.cuda.synchronize()
