# SPDX-License-Identifier: Apache-2.0
"""A small JAX training loop (flax, optax): an MLP on random data whose
batch size changes every step, so buffers of many sizes come and go.
Prints one JSON line: mean step time, final loss, the allocator asked for.

  jax_train.py STEPS
"""
import json
import os
import sys
import time

import jax
import jax.numpy as jnp
import flax.linen as nn
import optax


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        for w in (2048, 2048, 2048):
            x = nn.gelu(nn.Dense(w)(x))
        return nn.Dense(10)(x)


def main():
    steps = int(sys.argv[1])
    model = MLP()
    key = jax.random.PRNGKey(0)
    params = model.init(key, jnp.ones((1, 1024)))
    opt = optax.adam(1e-3)
    state = opt.init(params)

    @jax.jit
    def train(params, state, x, y):
        def loss_fn(p):
            logits = model.apply(p, x)
            return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
        loss, g = jax.value_and_grad(loss_fn)(params)
        upd, state = opt.update(g, state, params)
        return optax.apply_updates(params, upd), state, loss

    sizes = [512, 1024, 2048, 4096]
    data = []
    for i, b in enumerate(sizes):
        k = jax.random.PRNGKey(i + 1)
        data.append((jax.random.normal(k, (b, 1024)),
                     jax.random.randint(k, (b,), 0, 10)))
    for x, y in data:  # compile every shape
        params, state, loss = train(params, state, x, y)
    loss.block_until_ready()
    times = []
    for i in range(steps):
        x, y = data[i % len(data)]
        t = time.perf_counter()
        params, state, loss = train(params, state, x, y)
        loss.block_until_ready()
        times.append(time.perf_counter() - t)
    print(json.dumps({"allocator": os.environ.get("XLA_PYTHON_CLIENT_ALLOCATOR", "default"),
                      "ms_per_step": 1e3 * sum(times) / len(times),
                      "loss": float(loss)}))


main()
