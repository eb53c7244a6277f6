# SPDX-License-Identifier: Apache-2.0
"""pause_limits.py DIR: what a pause meets in flight. A CUDA graph captured
(a matmul chain) and a long stream of matmuls queued on a side stream when
it touches DIR/ready; it waits (in Python) for DIR/go, then checks the side
stream's result and replays the graph: prints "limits ok" when both match
what they were before the pause, else "limits BAD" and the differences."""
import os
import sys
import time

import torch

d = sys.argv[1]
torch.manual_seed(0)
a = torch.randn(4096, 4096, device="cuda")
s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):  # warm-up on a side stream, as capture wants
    for _ in range(3):
        y = torch.tanh(a @ a) @ a
    b = a.clone()
torch.cuda.current_stream().wait_stream(s)
torch.cuda.synchronize()
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    out = torch.tanh(a @ a) @ a
g.replay()
torch.cuda.synchronize()
want_graph = out.clone()
# about a second of work queued on the side stream, in flight at the pause
with torch.cuda.stream(s):
    for _ in range(200):
        b = torch.tanh(b @ a) * 0.5
ref = b  # finished later: compared with a second chain run after
open(f"{d}/ready", "w").close()
while not os.path.exists(f"{d}/go"):
    time.sleep(0.01)
torch.cuda.synchronize()
c = a.clone()
for _ in range(200):
    c = torch.tanh(c @ a) * 0.5
g.replay()
torch.cuda.synchronize()
ok_stream = torch.equal(ref, c)
ok_graph = torch.equal(out, want_graph)
print("limits", "ok" if ok_stream and ok_graph else "BAD", f"stream {ok_stream} graph {ok_graph}")
