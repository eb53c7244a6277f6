# SPDX-License-Identifier: Apache-2.0
"""PyTorch's CUDA graphs under cupool. Captures one forward pass of a
linear layer with torch.cuda.graph, replays it on new input and compares
with eager. Prints one line: "capture ok, replay matches: True" or
"capture failed: <the first line of the error>"."""
import torch


def main():
    torch.manual_seed(0)
    x = torch.randn(1024, 1024, device="cuda")
    model = torch.nn.Linear(1024, 1024).cuda()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            y = model(x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(g):
            y = model(x)
    except Exception as e:  # what the program sees is the check
        print("capture failed:", str(e).strip().splitlines()[0][:160])
        return
    x.copy_(torch.randn_like(x))
    g.replay()
    torch.cuda.synchronize()
    with torch.no_grad():
        ref = model(x)
    print("capture ok, replay matches:", bool(torch.allclose(y, ref, atol=1e-4)))


main()
