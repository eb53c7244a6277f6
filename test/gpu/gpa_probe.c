/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpa_probe.c - what the driver's entry points answer, on a real driver:
 * for each (name, CUDA version, flags) asked of cuGetProcAddress_v2 and
 * each name asked of dlsym on libcuda, which library and symbol the
 * answer is. Under cupool, the calls it serves must be cupool's for the
 * version and stream semantics asked for, and the driver's otherwise.
 * Prints "ask -> library:symbol" lines.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef CUresult (*gpa2_t)(const char *, void **, int, cuuint64_t,
                           CUdriverProcAddressQueryResult *);

static const char *who(void *fn, char *buf, size_t len)
{
    Dl_info i;
    if (!fn || !dladdr(fn, &i) || !i.dli_fname)
        return "NULL";
    const char *lib = strrchr(i.dli_fname, '/');
    lib = lib ? lib + 1 : i.dli_fname;
    snprintf(buf, len, "%s:%s", strstr(lib, "cupool") ? "cupool" : "driver",
             i.dli_sname ? i.dli_sname : "?");
    return buf;
}

int main(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    gpa2_t gpa = (gpa2_t)dlsym(h, "cuGetProcAddress_v2");
    CUresult (*init)(unsigned) = (CUresult (*)(unsigned))dlsym(h, "cuInit");
    if (!gpa || !init || init(0) != CUDA_SUCCESS)
        return 1;
    static const struct { const char *name; int ver; int flags; } asks[] = {
        {"cuMemAlloc", 13000, 0}, {"cuMemAlloc", 3000, 0}, {"cuMemFree", 13000, 0},
        {"cuMemGetInfo", 13000, 0}, {"cuMemAllocAsync", 13000, 0},
        {"cuMemAllocAsync", 13000, 2}, {"cuMemFreeAsync", 13000, 2},
        {"cuStreamBeginCapture", 10000, 0}, {"cuStreamBeginCapture", 13000, 0},
        {"cuStreamBeginCapture", 13000, 2}, {"cuStreamEndCapture", 13000, 2},
        {"cuGetProcAddress", 11030, 0}, {"cuGetProcAddress", 13000, 0},
        {"cuMemCreate", 13000, 0}, {"cuStreamCreate", 13000, 0},
        {"cuDevicePrimaryCtxReset", 13000, 0}, {"cuDeviceGet", 13000, 0},
        {"cuLaunchKernel", 13000, 0}, {"cuLaunchKernel", 13000, 2},
    };
    char b[256];
    for (size_t i = 0; i < sizeof(asks) / sizeof(asks[0]); i++) {
        void *fn = NULL;
        CUdriverProcAddressQueryResult q;
        gpa(asks[i].name, &fn, asks[i].ver, (cuuint64_t)asks[i].flags, &q);
        printf("gpa %s %d %d -> %s\n", asks[i].name, asks[i].ver, asks[i].flags,
               who(fn, b, sizeof(b)));
    }
    static const char *names[] = {"cuMemAlloc_v2", "cuMemAlloc", "cuMemFree_v2",
                                  "cuGetProcAddress_v2", "cuCtxGetCurrent", "cuLaunchKernel"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        printf("dlsym %s -> %s\n", names[i], who(dlsym(h, names[i]), b, sizeof(b)));
    return 0;
}
