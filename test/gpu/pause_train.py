# SPDX-License-Identifier: Apache-2.0
"""pause_train.py: a GPT-2 (HF transformers, 6 layers, random init, no
download) trained on variable-length batches of about TOKENS tokens,
deterministic, STEPS steps, PyTorch's caching allocator on. With DIR set,
after step PAUSE_AT it touches $DIR/ready and waits (in Python, between
steps) for $DIR/go: scripts/gpu-pause pauses and resumes it meanwhile.
Prints one JSON line: the losses (bit-equal across runs), and PyTorch's
reserved bytes at the pause."""
import json
import os
import random
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel

TOKENS = int(os.environ.get("TOKENS", "16384"))
STEPS = int(os.environ.get("STEPS", "12"))
PAUSE_AT = int(os.environ.get("PAUSE_AT", "6"))
d = os.environ.get("DIR")
torch.manual_seed(0)
torch.use_deterministic_algorithms(True)
cfg = GPT2Config(n_layer=6)
cfg._attn_implementation = "eager"  # the fused kernels' backward is not deterministic
model = GPT2LMHeadModel(cfg).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
rng = random.Random(1)
gen = torch.Generator(device="cpu").manual_seed(2)
losses, reserved = [], 0
for step in range(STEPS):
    L = rng.randint(64, 1024)
    ids = torch.randint(0, 50257, (max(1, TOKENS // L), L), generator=gen).cuda()
    loss = model(input_ids=ids, labels=ids).loss
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    losses.append(loss.item())
    if d and step == PAUSE_AT:
        torch.cuda.synchronize()
        reserved = torch.cuda.memory_reserved()
        open(f"{d}/ready", "w").close()
        while not os.path.exists(f"{d}/go"):
            time.sleep(0.01)
print(json.dumps({"losses": [float.hex(x) for x in losses], "reserved_at_pause": reserved}))
