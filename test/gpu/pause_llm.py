# SPDX-License-Identifier: Apache-2.0
"""pause_llm.py DIR LAYERS BUSY - a program nobody here wrote, paused
between two generations: transformers' LlamaForCausalLM of LAYERS layers
(hidden 4096, bf16, weights drawn from a fixed seed on the GPU, nothing
downloaded) generates 64 tokens greedily for 4 prompts, writes DIR/ready,
waits for DIR/go (paused and resumed meanwhile), generates again, and
prints "kept ok" if the tokens and every step's logits are bit-equal to
the first generation's. BUSY is taken for pause_hold.py's sake and
unused."""
import os
import sys
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

d, layers = sys.argv[1], int(sys.argv[2])
torch.manual_seed(0)
torch.set_default_dtype(torch.bfloat16)
cfg = LlamaConfig(hidden_size=4096, intermediate_size=11008, num_hidden_layers=layers,
                  num_attention_heads=32, num_key_value_heads=32, vocab_size=32000)
with torch.device("cuda"):
    model = LlamaForCausalLM(cfg).eval()
prompt = torch.randint(0, 32000, (4, 128), device="cuda")


def generate():
    with torch.no_grad():
        g = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=64,
                           min_new_tokens=64, do_sample=False, output_scores=True,
                           return_dict_in_generate=True, pad_token_id=0)
    torch.cuda.synchronize()
    return g.sequences, torch.stack(g.scores)


first, first_scores = generate()
params = sum(p.numel() for p in model.parameters()) * 2 / 2**30
open(d + "/ready", "w").close()
while not os.path.exists(d + "/go"):
    time.sleep(0.01)
again, again_scores = generate()
ok = torch.equal(first, again) and torch.equal(first_scores, again_scores)
print("kept ok" if ok else "BAD: the generation after the pause differs",
      f"(Llama {layers} layers, {params:.1f} GiB of weights, "
      f"{torch.cuda.memory_allocated() / 2**30:.1f} GiB allocated)")
