# SPDX-License-Identifier: Apache-2.0
"""The random mix (55% allocations, 512 B to 4 MiB log-uniform, at most 4000
live) through PyTorch's caching allocator, called from C++ (an extension
built here with load_inline) so that no Python overhead is timed. Prints one
JSON line with the median ns per operation of five runs."""
import json

from torch.utils.cpp_extension import load_inline

SRC = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <chrono>
#include <cmath>
#include <random>
#include <vector>

double mix(int64_t ops, int64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    std::vector<size_t> size(ops);
    std::vector<char> coin(ops);
    for (int64_t i = 0; i < ops; i++) {
        size[i] = (size_t)std::exp2(9.0 + 13.0 * u(rng));
        coin[i] = rng() % 100 < 55;
    }
    std::vector<void *> live;
    live.reserve(4000);
    auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < ops; i++) {
        if (live.empty() || (coin[i] && live.size() < 4000)) {
            live.push_back(c10::cuda::CUDACachingAllocator::raw_alloc(size[i]));
        } else {
            size_t k = size[i] % live.size();
            c10::cuda::CUDACachingAllocator::raw_delete(live[k]);
            live[k] = live.back();
            live.pop_back();
        }
    }
    auto t1 = std::chrono::steady_clock::now();
    for (void *p : live)
        c10::cuda::CUDACachingAllocator::raw_delete(p);
    return std::chrono::duration<double, std::nano>(t1 - t0).count() / ops;
}
"""

m = load_inline("cupool_torch_mix", cpp_sources=SRC, functions=["mix"],
                extra_cflags=["-O2"], with_cuda=True, verbose=False)
import torch  # noqa: E402  (after the build: the extension links it)

torch.cuda.init()
m.mix(50000, 7)  # warm-up: fill the cache
runs = sorted(m.mix(200000, 11 + r) for r in range(5))
print(json.dumps({"bench": "mix", "mode": "torch", "ns_per_op": round(runs[2], 1)}))
