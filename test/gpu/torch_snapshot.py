# SPDX-License-Identifier: Apache-2.0
"""Records a PyTorch memory snapshot of the variable-length transformer
(native allocator, a few steps) for `cupool import-torch`, and what PyTorch
itself says at the moment of the snapshot, for the import test to check
against. Usage: torch_snapshot.py OUT.pickle OUT.json"""
import json
import pickle
import random
import sys

import torch

out_pickle, out_json = sys.argv[1], sys.argv[2]
try:  # no stack frames: they would make the snapshot large
    torch.cuda.memory._record_memory_history(enabled="all", context=None,
                                             stacks="python", max_entries=4_000_000)
except TypeError:
    torch.cuda.memory._record_memory_history(max_entries=4_000_000)
torch.manual_seed(0)
layer = torch.nn.TransformerEncoderLayer(1024, 16, dim_feedforward=4096,
                                         dropout=0.0, batch_first=True)
model = torch.nn.TransformerEncoder(layer, 4, enable_nested_tensor=False).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
rng = random.Random(2)
for step in range(8):
    L = rng.randint(8, 1024)
    B = max(1, 8192 // L)
    x = torch.randn(B, L, 1024, device="cuda")
    loss = model(x).float().pow(2).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
torch.cuda.synchronize()
snap = torch.cuda.memory._snapshot()
allocated = torch.cuda.memory_allocated()
truth = {
    "memory_allocated": allocated,
    "max_memory_allocated": torch.cuda.max_memory_allocated(),
    "max_memory_reserved": torch.cuda.max_memory_reserved(),
    "active_blocks": sum(1 for s in snap["segments"] for b in s["blocks"]
                         if b["state"] == "active_allocated"),
    "active_bytes": sum(b["size"] for s in snap["segments"] for b in s["blocks"]
                        if b["state"] == "active_allocated"),
    "trace_entries": sum(len(t) for t in snap["device_traces"]),
    "actions": sorted({e["action"] for t in snap["device_traces"] for e in t}),
    "entry_keys": sorted({k for t in snap["device_traces"] for e in t[:50] for k in e}),
    "torch": torch.__version__,
}
with open(out_pickle, "wb") as f:
    pickle.dump(snap, f)
with open(out_json, "w") as f:
    json.dump(truth, f, indent=1)
print(json.dumps(truth))
