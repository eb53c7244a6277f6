/* SPDX-License-Identifier: Apache-2.0 */
// launch_bench.cu - kernel launches per second: what the hooks cost a
// program that does not allocate (nothing on the launch path is wrapped).
// Prints one JSON line: the median over 7 batches of 20000 empty launches.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cuda_runtime.h>

__global__ void empty() {}

int main()
{
    empty<<<1, 1>>>();
    cudaDeviceSynchronize();
    double us[7];
    for (int r = 0; r < 7; r++) {
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < 20000; i++)
            empty<<<1, 1>>>();
        cudaDeviceSynchronize();
        auto t1 = std::chrono::steady_clock::now();
        us[r] = std::chrono::duration<double, std::micro>(t1 - t0).count() / 20000;
    }
    std::sort(us, us + 7);
    printf("{\"launch_us\":%.4f}\n", us[3]);
    return cudaGetLastError() != cudaSuccess;
}
