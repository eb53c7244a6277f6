/* SPDX-License-Identifier: Apache-2.0 */
/*
 * vmm.c - CUPOOL_VMM and CUPOOL_STITCH: granules given back, holes stitched,
 * peers' access, IPC of VMM and stitched blocks.
 */
#include "prog.h"

#ifdef SIMCUDA
/* CUPOOL_VMM or CUPOOL_STITCH on two devices: a segment grants access to
 * its device, and to each device the program enabled peer access to it
 * from, through the runtime or the driver: segments mapped before the
 * enabling and after. Prints each block's devices (a bit each). */
static int vmm_peer(void)
{
    void *a, *b, *c;
    OK(cudaSetDevice(1));
    OK(cudaMalloc(&c, 8 * MIB));
    unsigned c0 = simcuda_vmm_access((uintptr_t)c);
    /* Device 1 reaches device 0, which has no pool yet. */
    OK(cudaDeviceEnablePeerAccess(0, 0));
    CHECK(cudaDeviceEnablePeerAccess(0, 0) == cudaErrorPeerAccessAlreadyEnabled);
    cudaGetLastError();
    OK(cudaSetDevice(0));
    OK(cudaMalloc(&a, 8 * MIB));
    OK(cudaMalloc(&b, 64 * MIB)); /* a segment of its own */
    unsigned a0 = simcuda_vmm_access((uintptr_t)a), b0 = simcuda_vmm_access((uintptr_t)b);
    /* Through the driver: device 0 reaches device 1, whose segment is
     * mapped already. */
    CUcontext ctx1;
    CHECK(cuDevicePrimaryCtxRetain(&ctx1, 1) == CUDA_SUCCESS);
    CHECK(cuCtxEnablePeerAccess(ctx1, 0) == CUDA_SUCCESS);
    unsigned c1 = simcuda_vmm_access((uintptr_t)c);
    printf("access: a %u, b %u, c %u then %u\n", a0, b0, c0, c1);
    CHECK(a0 == 3 && b0 == 3 && c0 == 2 && c1 == 3);
    OK(cudaFree(a));
    OK(cudaFree(b));
    OK(cudaSetDevice(1));
    OK(cudaFree(c));
    return 0;
}
#endif /* SIMCUDA */
/* Sets n bytes at p to v and checks what a later read sees. */
static void fill(void *p, int v, size_t n)
{
#ifdef SIMCUDA
    memset(p, v, n);
#else
    OK(cudaMemset(p, v, n));
#endif
}

static void expect(const void *p, int v, size_t n)
{
    static unsigned char host[4096];
    for (size_t off = 0; off < n; off += n / 8) {
#ifdef SIMCUDA
        memcpy(host, (const char *)p + off, sizeof(host));
#else
        OK(cudaMemcpy(host, (const char *)p + off, sizeof(host), cudaMemcpyDeviceToHost));
#endif
        for (size_t i = 0; i < sizeof(host); i++)
            CHECK(host[i] == v);
    }
}

/* Under CUPOOL_VMM=1 and a 48 MiB cap: a 40 MiB segment is freed, then
 * holds a 10 MiB block at its front; 36 MiB more fit only if the pool
 * gives back the 30 MiB free behind that block, which VMM segments allow.
 * The live block keeps its bytes; and the give-back waited for the device
 * (the fence had recorded work just before). Without VMM the 36 MiB fail. */
static int vmm(void)
{
    char *a, *b, *c;
    OK(cudaMalloc((void **)&a, 40 * MIB));
    fill(a, 1, 40 * MIB);
    OK(cudaFree(a));
    OK(cudaMalloc((void **)&b, 10 * MIB));
    CHECK(b == a);
    fill(b, 2, 10 * MIB);
#ifdef SIMCUDA
    simcuda_stats before = sim(0);
    CHECK(before.mallocs == 0 && before.vmm_mapped == 40 * MIB);
#endif
    OK(cudaMalloc((void **)&c, 36 * MIB));
    fill(c, 3, 36 * MIB);
    expect(b, 2, 10 * MIB);
    expect(c, 3, 36 * MIB);
#ifdef SIMCUDA
    simcuda_stats after = sim(0);
    printf("unmapped %lu granules, %lu before the device was waited for\n",
           after.vmm_unmaps - before.vmm_unmaps, after.unsynced_unmaps);
    CHECK(after.vmm_unmaps - before.vmm_unmaps == 15);
    CHECK(after.unsynced_unmaps == 0);
    CHECK(after.vmm_mapped == 46 * MIB);
#endif
    size_t free_b, total;
    OK(cudaMemGetInfo(&free_b, &total));
    CHECK(total == 48 * MIB);
    OK(cudaFree(b));
    OK(cudaFree(c));
    return 0;
}

/* A 3h segment holding h live (b, filled with 2s) between two free h
 * holes, the first at *a. */
static int two_holes(size_t h, char **a, char **b)
{
    char *big, *c;
    OK(cudaMalloc((void **)&big, 3 * h));
    OK(cudaFree(big));
    OK(cudaMalloc((void **)a, h));
    OK(cudaMalloc((void **)b, h));
    OK(cudaMalloc((void **)&c, h));
    CHECK(*a == big && *b == *a + h && c == *a + 2 * h);
    fill(*b, 2, h);
    OK(cudaFree(*a));
    OK(cudaFree(c));
    return 0;
}

/* After a SIGUSR1 flush with nothing live: nothing mapped, nothing in use,
 * and no range unmapped while work could still use it. */
static int flushed_all(void)
{
    raise(SIGUSR1);
#ifdef SIMCUDA
    /* The helper flushes: wait until it is done (mapped and in use both
     * down), then judge. */
    for (int i = 0; i < 3000 && (sim(0).vmm_mapped || sim(0).used); i++)
        sleep_ms(10);
    simcuda_stats after = sim(0);
    printf("flushed: %llu bytes mapped, %llu in use, %lu unsynced unmaps, "
           "%lu device syncs\n", after.vmm_mapped, after.used, after.unsynced_unmaps,
           after.syncs);
    CHECK(after.vmm_mapped == 0 && after.used == 0 && after.unsynced_unmaps == 0);
#endif
    return 0;
}

/* Under CUPOOL_STITCH=1 with holes of h = RT_HOLE_MIB (8) and pieces of
 * RT_UNIT_MIB (2, CUPOOL_VMM_UNIT), under a cap of 3h + 4 MiB (rounded up
 * to a unit): a 3h segment holds h live between two h holes. 2h come from
 * the holes' pieces mapped again at new addresses (one mapping per unit;
 * the driver maps whole allocations only): nothing is reserved, created or
 * given back, and both blocks keep their bytes. Freed, that range is
 * unstitched for a request it does not fit (2h + 4 MiB, with fresh units
 * for the 4 MiB), and its addresses are unmapped only once the device was
 * waited for (the SIGUSR1 flush, here). */
static int stitch(void)
{
    const char *hv = getenv("RT_HOLE_MIB"), *uv = getenv("RT_UNIT_MIB");
    size_t h = (hv ? (size_t)atoi(hv) : 8) * MIB, u = (uv ? (size_t)atoi(uv) : 2) * MIB;
    CHECK(h && u && h % u == 0);
    char *a, *b, *d, *e;
    CHECK(two_holes(h, &a, &b) == 0);
#ifdef SIMCUDA
    simcuda_stats before = sim(0);
#endif
    OK(cudaMalloc((void **)&d, 2 * h));
    CHECK(d < a || d >= a + 3 * h);
    fill(d, 3, 2 * h);
    expect(b, 2, h);
    expect(d, 3, 2 * h);
#ifdef SIMCUDA
    simcuda_stats after = sim(0);
    printf("stitched: %lu mappings, %llu bytes more in use, %lu unmapped\n",
           after.vmm_maps - before.vmm_maps, after.used - before.used,
           after.vmm_unmaps - before.vmm_unmaps);
    /* One mapping per unit of the two holes. */
    CHECK(after.vmm_maps - before.vmm_maps == 2 * h / u && after.used == before.used);
    CHECK(after.vmm_unmaps == before.vmm_unmaps);
#endif
    OK(cudaFree(d));
    /* Larger than both holes: they and fresh units for the rest. */
    size_t esz = 2 * h + 4 * MIB, fresh = (esz + u - 1) / u * u - 2 * h;
    OK(cudaMalloc((void **)&e, esz));
    fill(e, 4, esz);
    expect(b, 2, h);
    expect(e, 4, esz);
#ifdef SIMCUDA
    after = sim(0);
    printf("restitched: %llu bytes more in use, %lu unmapped, %lu unsynced\n",
           after.used - before.used, after.vmm_unmaps - before.vmm_unmaps,
           after.unsynced_unmaps);
    CHECK(after.used - before.used == fresh);
    CHECK(after.vmm_unmaps == before.vmm_unmaps); /* d's range waits */
#else
    (void)fresh;
#endif
    OK(cudaFree(e));
    OK(cudaFree(b));
    return flushed_all();
}

/* Under CUPOOL_STITCH=1 and CUPOOL_VMM_UNIT=2M: a 24 MiB segment holds
 * 8 MiB live between two 8 MiB holes. 12 MiB are stitched from the first
 * hole and half the second; freed, they grow in place for 16 MiB: only
 * the second hole's other half is mapped (2 mappings, at the end of the
 * same addresses), nothing is unmapped or newly in use, and every byte
 * lands where it should. */
static int stitch_extend(void)
{
    size_t h = 8 * MIB;
    char *a, *b, *d, *e;
    CHECK(two_holes(h, &a, &b) == 0);
    OK(cudaMalloc((void **)&d, 12 * MIB));
    CHECK(d < a || d >= a + 24 * MIB);
    fill(d, 3, 12 * MIB);
    OK(cudaFree(d));
#ifdef SIMCUDA
    simcuda_stats before = sim(0);
#endif
    OK(cudaMalloc((void **)&e, 16 * MIB));
    fill(e, 4, 16 * MIB);
    expect(b, 2, 8 * MIB);
    expect(e, 4, 16 * MIB);
#ifdef SIMCUDA
    simcuda_stats after = sim(0);
    printf("extended: same address %d, %lu mappings, %llu bytes more in use, "
           "%lu unmapped\n", e == d, after.vmm_maps - before.vmm_maps,
           after.used - before.used, after.vmm_unmaps - before.vmm_unmaps);
    CHECK(e == d && after.vmm_maps - before.vmm_maps == 2);
    CHECK(after.used == before.used && after.vmm_unmaps == before.vmm_unmaps);
#else
    printf("extended: same address %d\n", e == d);
    CHECK(e == d);
#endif
    OK(cudaFree(e));
    OK(cudaFree(b));
    return flushed_all();
}

/* IPC of a stitched block (CUPOOL_STITCH=1, CUPOOL_VMM_UNIT=2M): d is
 * 16 MiB over two 8 MiB holes of one segment, first half 0x51, second
 * 0x52. Another process opens d's handle and one for an address inside
 * its second half, finds each half's bytes at both ends, and writes 0x53
 * over the first 4 KiB of the second half; back here, they are in d, and
 * the live block between the holes is untouched. */
static int ipc_stitched(void)
{
    size_t h = 8 * MIB;
    char *a, *b, *d;
    CHECK(two_holes(h, &a, &b) == 0);
    OK(cudaMalloc((void **)&d, 2 * h));
    CHECK(d < a || d >= a + 3 * h); /* stitched: new addresses */
    fill(d, 0x51, h);
    fill(d + h, 0x52, h);
    cudaIpcMemHandle_t hd, hi;
    OK(cudaIpcGetMemHandle(&hd, d));
    OK(cudaIpcGetMemHandle(&hi, d + h + 4096));
    CHECK(importer("stitched", &hd, &hi, NULL) == 0);
    CHECK(dev_byte(d + h) == 0x53 && dev_byte(d + h + 4095) == 0x53);
    CHECK(dev_byte(d + h + 4096) == 0x52 && dev_byte(d + 2 * h - 1) == 0x52);
    expect(d, 0x51, h);
    expect(b, 2, h);
    printf("ipc stitched ok: both holes shared at their offsets\n");
    OK(cudaFree(d));
    OK(cudaFree(b));
    return 0;
}

/* IPC of a 1 GiB block in VMM segments (512 pieces of 2 MiB) with at most
 * 1024 descriptors open in each process: the pieces travel and are mapped
 * a batch at a time (all at once, they would not fit). Another process
 * reads both ends and writes the middle. */
static int ipc_large(void)
{
    struct rlimit rl;
    CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
    rl.rlim_cur = rl.rlim_max < 1024 ? rl.rlim_max : 1024;
    CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0);
    size_t n = 1ull << 30;
    char *d;
    OK(cudaMalloc((void **)&d, n));
    dev_fill(d, 0x61, 4096);
    dev_fill(d + n - 4096, 0x62, 4096);
    cudaIpcMemHandle_t h;
    OK(cudaIpcGetMemHandle(&h, d));
    CHECK(importer("large", &h, &h, NULL) == 0);
    CHECK(dev_byte(d + n / 2) == 0x63 && dev_byte(d + n / 2 - 1) != 0x63);
    printf("ipc large ok: 1 GiB shared in 2 MiB pieces\n");
    OK(cudaFree(d));
    return 0;
}

int ipc_import_large(const cudaIpcMemHandle_t *h)
{
    size_t n = 1ull << 30;
    char *d;
    OK(cudaIpcOpenMemHandle((void **)&d, *h, cudaIpcMemLazyEnablePeerAccess));
    CHECK(dev_byte(d) == 0x61 && dev_byte(d + n - 1) == 0x62);
    dev_fill(d + n / 2, 0x63, 4096);
    OK(cudaIpcCloseMemHandle(d));
    return 0;
}

int ipc_import_stitched(const cudaIpcMemHandle_t *hd, const cudaIpcMemHandle_t *hi)
{
    size_t h = 8 * MIB;
    char *d, *in;
    unsigned fl = cudaIpcMemLazyEnablePeerAccess;
    OK(cudaIpcOpenMemHandle((void **)&d, *hd, fl));
    OK(cudaIpcOpenMemHandle((void **)&in, *hi, fl));
    CHECK(dev_byte(d) == 0x51 && dev_byte(d + h - 1) == 0x51);
    CHECK(dev_byte(d + h) == 0x52 && dev_byte(d + 2 * h - 1) == 0x52);
    CHECK(dev_byte(in) == 0x52 && dev_byte(in + h - 4096 - 1) == 0x52);
    dev_fill(d + h, 0x53, 4096);
    CHECK(dev_byte(in - 1) == 0x53); /* the same memory, mapped twice */
    OK(cudaIpcCloseMemHandle(in));
    OK(cudaIpcCloseMemHandle(d));
    return 0;
}

const prog_scenario prog_vmm_scenarios[] = {
#ifdef SIMCUDA
    {"vmm_peer", vmm_peer},
#endif
    {"ipc_stitched", ipc_stitched},
    {"ipc_large", ipc_large},
    {"vmm", vmm},
    {"stitch", stitch},
    {"stitch_extend", stitch_extend},
    {NULL, NULL},
};
