/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nvml_watch.c - the device memory in use as NVML counts it (nvidia-smi
 * reads NVML), read from a process of its own (scripts/gpu-idle).
 *   nvml_watch GPU                     print the used MiB once
 *   nvml_watch GPU MIB TIMEOUT_MS      print "watching USED" after the
 *                                      first reading, then read every 1 ms:
 *                                      "reached USED at MS ms unix UNIX_MS"
 *                                      when used is first at or below MIB
 *                                      (MS from the first reading; UNIX_MS
 *                                      the wall clock, to set against the
 *                                      moment a request went out), or
 *                                      "timeout USED" after TIMEOUT_MS (exit 1)
 * GPU is NVML's index (CUDA_VISIBLE_DEVICES does not apply) or a UUID
 * (GPU-...). libnvidia-ml.so.1 comes with the driver; it is opened with
 * dlopen, so no header or link flag is needed: cc -O2 nvml_watch.c -ldl.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    unsigned long long total, free, used;
} nvml_memory; /* nvmlMemory_t */

static int (*get_memory)(void *, nvml_memory *);
static void *dev;

static double ms_of(clockid_t clock)
{
    struct timespec t;
    clock_gettime(clock, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static long used_mib(void)
{
    nvml_memory m;
    return get_memory(dev, &m) == 0 ? (long)(m.used >> 20) : -1;
}

int main(int argc, char **argv)
{
    if (argc != 2 && argc != 4) {
        fprintf(stderr, "usage: nvml_watch GPU [MIB TIMEOUT_MS]\n");
        return 2;
    }
    void *nv = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (!nv) {
        fprintf(stderr, "nvml_watch: %s\n", dlerror());
        return 2;
    }
    int (*init)(void) = (int (*)(void))dlsym(nv, "nvmlInit_v2");
    int (*by_index)(unsigned, void **) = (int (*)(unsigned, void **))dlsym(
        nv, "nvmlDeviceGetHandleByIndex_v2");
    int (*by_uuid)(const char *, void **) = (int (*)(const char *, void **))dlsym(
        nv, "nvmlDeviceGetHandleByUUID");
    get_memory = (int (*)(void *, nvml_memory *))dlsym(nv, "nvmlDeviceGetMemoryInfo");
    if (!init || !by_index || !by_uuid || !get_memory || init() != 0) {
        fprintf(stderr, "nvml_watch: NVML does not start\n");
        return 2;
    }
    const char *gpu = argv[1];
    int r = strncmp(gpu, "GPU-", 4) && strncmp(gpu, "MIG-", 4)
                ? by_index((unsigned)atoi(gpu), &dev)
                : by_uuid(gpu, &dev);
    if (r != 0 || used_mib() < 0) {
        fprintf(stderr, "nvml_watch: no device %s (NVML error %d)\n", gpu, r);
        return 2;
    }
    long used = used_mib();
    if (argc == 2) {
        printf("%ld\n", used);
        return 0;
    }
    long threshold = atol(argv[2]);
    double timeout = atof(argv[3]), t0 = ms_of(CLOCK_MONOTONIC);
    printf("watching %ld\n", used);
    fflush(stdout);
    for (;;) {
        double t = ms_of(CLOCK_MONOTONIC) - t0;
        if (used >= 0 && used <= threshold) {
            printf("reached %ld at %.0f ms unix %.0f\n", used, t, ms_of(CLOCK_REALTIME));
            return 0;
        }
        if (t >= timeout) {
            printf("timeout %ld\n", used);
            return 1;
        }
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
        used = used_mib();
    }
}
