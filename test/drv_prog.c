/* SPDX-License-Identifier: Apache-2.0 */
/*
 * drv_prog.c - scenarios that reach CUDA as a static runtime, CuPy or XLA
 * do: no runtime linked; the driver's entry points come from
 * dlopen("libcuda.so.1") + dlsym("cuGetProcAddress_v2") + cuGetProcAddress,
 * or (scenario plt) from linking the driver. Run preloaded by test_shim on
 * the simulated driver; each exits 0 when what it checks holds, and prints
 * why not otherwise.
 *
 * Usage: drv_prog SCENARIO
 */
#include <dlfcn.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda.h>

#include "simcuda.h"

#undef cuGetProcAddress

#define CHECK(cond)                                                           \
    do {                                                                      \
        if (!(cond)) {                                                        \
            fprintf(stderr, "drv_prog: %s:%d: %s\n", __FILE__, __LINE__, #cond); \
            exit(1);                                                          \
        }                                                                     \
    } while (0)

#define MiB (1ull << 20)

typedef CUresult (*gpa_fn)(const char *, void **, int, cuuint64_t,
                           CUdriverProcAddressQueryResult *);

/* dlsym as a program built against glibc before 2.34 binds it. */
void *dlsym_225(void *handle, const char *name);
__asm__(".symver dlsym_225, dlsym@GLIBC_2.2.5");

/* The driver as a static runtime finds it. */
static struct {
    void *lib;
    gpa_fn gpa;
    CUresult (*init)(unsigned int);
    CUresult (*alloc)(CUdeviceptr *, size_t);
    CUresult (*free)(CUdeviceptr);
    CUresult (*info)(size_t *, size_t *);
    CUresult (*alloc_async)(CUdeviceptr *, size_t, CUstream);
    CUresult (*free_async)(CUdeviceptr, CUstream);
    CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                       unsigned long long);
    CUresult (*release)(CUmemGenericAllocationHandle);
    CUresult (*stream_create)(CUstream *, unsigned int);
    CUresult (*stream_destroy)(CUstream);
    CUresult (*begin_capture)(CUstream, CUstreamCaptureMode);
    CUresult (*end_capture)(CUstream, CUgraph *);
    CUresult (*reset)(CUdevice);
} drv;

static void *entry(const char *name, int version, cuuint64_t flags)
{
    void *fn = NULL;
    CUdriverProcAddressQueryResult q;
    CUresult r = drv.gpa(name, &fn, version, flags, &q);
    CHECK(r == CUDA_SUCCESS && q == CU_GET_PROC_ADDRESS_SUCCESS && fn);
    return fn;
}

static void load(void)
{
    drv.lib = dlopen("libcuda.so.1", RTLD_NOW);
    CHECK(drv.lib);
    drv.gpa = (gpa_fn)dlsym(drv.lib, "cuGetProcAddress_v2");
    CHECK(drv.gpa);
    *(void **)&drv.init = entry("cuInit", 13000, 0);
    *(void **)&drv.alloc = entry("cuMemAlloc", 13000, 0);
    *(void **)&drv.free = entry("cuMemFree", 13000, 0);
    *(void **)&drv.info = entry("cuMemGetInfo", 13000, 0);
    *(void **)&drv.alloc_async = entry("cuMemAllocAsync", 13000, 0);
    *(void **)&drv.free_async = entry("cuMemFreeAsync", 13000, 0);
    *(void **)&drv.create = entry("cuMemCreate", 13000, 0);
    *(void **)&drv.release = entry("cuMemRelease", 13000, 0);
    *(void **)&drv.stream_create = entry("cuStreamCreate", 13000, 0);
    *(void **)&drv.stream_destroy = entry("cuStreamDestroy", 13000, 0);
    *(void **)&drv.begin_capture = entry("cuStreamBeginCapture", 13000, 0);
    *(void **)&drv.end_capture = entry("cuStreamEndCapture", 13000, 0);
    *(void **)&drv.reset = entry("cuDevicePrimaryCtxReset", 13000, 0);
    CHECK(drv.init(0) == CUDA_SUCCESS);
}

static simcuda_stats sim(void)
{
    simcuda_stats s;
    simcuda_get_stats(0, &s);
    return s;
}

/* 64 blocks of 1 MiB, freed and allocated again, three times: the pool
 * serves them from 32 segments of 2 MiB, made in the first round; without
 * it, each block is one driver allocation. */
static void churn(CUresult (*alloc)(CUdeviceptr *, size_t), CUresult (*free_fn)(CUdeviceptr))
{
    unsigned long before = sim().mallocs;
    CUdeviceptr p[64];
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 64; i++)
            CHECK(alloc(&p[i], MiB) == CUDA_SUCCESS && p[i]);
        for (int i = 0; i < 64; i++)
            CHECK(free_fn(p[i]) == CUDA_SUCCESS);
    }
    unsigned long n = sim().mallocs - before;
    printf("driver allocations for 192 blocks: %lu\n", n);
    CHECK(n <= 32);
}

static volatile sig_atomic_t ended;
static void on_term(int sig) { (void)sig; ended = 1; }

/* Served through the pointers cuGetProcAddress handed out; with $READY,
 * holds 3 MiB live and 1 MiB cached until SIGTERM (stat, flush from
 * outside), then says what the driver saw. */
static int serve(void)
{
    load();
    churn(drv.alloc, drv.free);
    const char *ready = getenv("READY");
    if (!ready)
        return 0;
    CUdeviceptr live, cached;
    CHECK(drv.alloc(&live, 3 * MiB) == CUDA_SUCCESS);
    CHECK(drv.alloc(&cached, 1 * MiB) == CUDA_SUCCESS);
    CHECK(drv.free(cached) == CUDA_SUCCESS);
    struct sigaction sa = {.sa_handler = on_term};
    sigaction(SIGTERM, &sa, NULL);
    FILE *f = fopen(ready, "w");
    CHECK(f);
    fclose(f);
    while (!ended)
        pause();
    printf("driver frees: %lu\n", sim().frees);
    return 0;
}

/* Served through the driver's own names, linked (a -lcuda program). */
static int plt(void)
{
    CHECK(cuInit(0) == CUDA_SUCCESS);
    churn(cuMemAlloc_v2, cuMemFree_v2);
    return 0;
}

/* Which library and symbol a function pointer is. */
static const char *who(void *fn, char *buf, size_t len)
{
    Dl_info info;
    if (!dladdr(fn, &info) || !info.dli_fname || !info.dli_sname)
        return "?";
    const char *lib = strrchr(info.dli_fname, '/');
    lib = lib ? lib + 1 : info.dli_fname;
    snprintf(buf, len, "%s:%s", strstr(lib, "cupool") ? "cupool" : "driver", info.dli_sname);
    return buf;
}

#define EXPECT_ENTRY(name, version, flags, want)                              \
    do {                                                                      \
        char b_[128];                                                         \
        const char *got_ = who(entry(name, version, flags), b_, sizeof(b_));  \
        if (strcmp(got_, want)) {                                             \
            fprintf(stderr, "drv_prog: %s v%d flags %d: %s, not %s\n", name,   \
                    version, flags, got_, want);                              \
            exit(1);                                                          \
        }                                                                     \
    } while (0)

#define EXPECT_DLSYM(handle, name, want)                                      \
    do {                                                                      \
        char b_[128];                                                         \
        void *f_ = dlsym(handle, name);                                       \
        const char *got_ = f_ ? who(f_, b_, sizeof(b_)) : "NULL";             \
        if (strcmp(got_, want)) {                                             \
            fprintf(stderr, "drv_prog: dlsym %s: %s, not %s\n", name, got_, want); \
            exit(1);                                                          \
        }                                                                     \
    } while (0)

/* The version and the stream semantics asked for are the ones given. */
static int versions(void)
{
    load();
    EXPECT_ENTRY("cuMemAlloc", 13000, 0, "cupool:cuMemAlloc_v2");
    EXPECT_ENTRY("cuMemAlloc", 3000, 0, "driver:cuMemAlloc"); /* 32-bit ABI */
    EXPECT_ENTRY("cuMemAllocAsync", 12000, 0, "cupool:cuMemAllocAsync");
    EXPECT_ENTRY("cuMemAllocAsync", 12000, 2, "cupool:cuMemAllocAsync_ptsz");
    EXPECT_ENTRY("cuStreamBeginCapture", 10000, 0, "cupool:cuStreamBeginCapture"); /* v1 */
    EXPECT_ENTRY("cuStreamBeginCapture", 10000, 2, "cupool:cuStreamBeginCapture_ptsz");
    EXPECT_ENTRY("cuStreamBeginCapture", 12000, 0, "cupool:cuStreamBeginCapture_v2");
    EXPECT_ENTRY("cuStreamBeginCapture", 12000, 2, "cupool:cuStreamBeginCapture_v2_ptsz");
    EXPECT_ENTRY("cuGetProcAddress", 11030, 0, "cupool:cuGetProcAddress");
    EXPECT_ENTRY("cuGetProcAddress", 12000, 0, "cupool:cuGetProcAddress_v2");
    EXPECT_ENTRY("cuDeviceGet", 13000, 0, "driver:cuDeviceGet");
    EXPECT_ENTRY("cuCtxSynchronize", 13000, 0, "driver:cuCtxSynchronize");
    EXPECT_DLSYM(drv.lib, "cuMemAlloc_v2", "cupool:cuMemAlloc_v2");
    EXPECT_DLSYM(drv.lib, "cuMemAlloc", "driver:cuMemAlloc");
    EXPECT_DLSYM(drv.lib, "cuCtxGetCurrent", "driver:cuCtxGetCurrent");
    EXPECT_DLSYM(drv.lib, "cuGetProcAddress", "cupool:cuGetProcAddress");
    EXPECT_DLSYM(drv.lib, "no_such_symbol", "NULL");
    /* The same through dlsym@GLIBC_2.2.5 (programs built before 2.34). */
    char b225[128];
    CHECK(!strcmp(who(dlsym_225(drv.lib, "cuMemAlloc_v2"), b225, sizeof(b225)),
                  "cupool:cuMemAlloc_v2"));
    CHECK(!strcmp(who(dlsym_225(drv.lib, "cuDeviceGet"), b225, sizeof(b225)),
                  "driver:cuDeviceGet"));
    /* RTLD_NEXT from the program: the next definition after it, which is
     * cupool's (preloaded) for cuMemAlloc_v2, the driver's for the rest. */
    EXPECT_DLSYM(RTLD_NEXT, "cuMemAlloc_v2", "cupool:cuMemAlloc_v2");
    EXPECT_DLSYM(RTLD_NEXT, "cuCtxGetCurrent", "driver:cuCtxGetCurrent");
    EXPECT_DLSYM(RTLD_DEFAULT, "cuDeviceGet", "driver:cuDeviceGet");
    /* An old cuGetProcAddress gets the same answers. */
    CUresult (*gpa1)(const char *, void **, int, cuuint64_t);
    *(void **)&gpa1 = entry("cuGetProcAddress", 11030, 0);
    void *fn = NULL;
    char b[128];
    CHECK(gpa1("cuMemFree", &fn, 12000, 0) == CUDA_SUCCESS);
    CHECK(!strcmp(who(fn, b, sizeof(b)), "cupool:cuMemFree_v2"));
    printf("versions ok\n");
    return 0;
}

/* Device memory of device 0, as cuMemCreate takes it. */
static const CUmemAllocationProp pinned = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                           .location = {CU_MEM_LOCATION_TYPE_DEVICE, 0}};

/* A cuMemCreate of 10 MiB is refused (under a budget of 8 MiB). */
static void create_10mib_refused(void)
{
    CUmemGenericAllocationHandle h;
    CHECK(drv.create(&h, 10 * MiB, &pinned, 0) == CUDA_ERROR_OUT_OF_MEMORY);
}

/* Run under a budget of 8 MiB: a cap, or a group's. */
static int create_refused(void)
{
    load();
    create_10mib_refused();
    printf("create refused\n");
    return 0;
}

/* The cap covers what is passed on: stream-ordered and cuMemCreate'd
 * memory count, and a flush of idle segments makes room for them. Run
 * with CUPOOL_MAX_RESERVED=8M. */
static int cap(void)
{
    load();
    create_10mib_refused(); /* before any pool exists, the cap already holds */
    CUdeviceptr p[16];
    int n = 0;
    CUresult r;
    while (n < 16 && (r = drv.alloc(&p[n], MiB)) == CUDA_SUCCESS)
        n++;
    CHECK(r == CUDA_ERROR_OUT_OF_MEMORY);
    CHECK(n == 8);
    size_t f = 0, t = 0;
    CHECK(drv.info(&f, &t) == CUDA_SUCCESS && t == 8 * MiB && f == 0);
    for (int i = 0; i < n; i++)
        CHECK(drv.free(p[i]) == CUDA_SUCCESS);
    /* 8 MiB cached: a 6 MiB stream-ordered allocation needs a flush. */
    CUdeviceptr a;
    CHECK(drv.alloc_async(&a, 6 * MiB, NULL) == CUDA_SUCCESS);
    CHECK(drv.info(&f, &t) == CUDA_SUCCESS && f == 2 * MiB);
    CUdeviceptr b;
    CHECK(drv.alloc(&b, 4 * MiB) == CUDA_ERROR_OUT_OF_MEMORY);
    CUmemGenericAllocationHandle h1, h2;
    CHECK(drv.create(&h1, 2 * MiB, &pinned, 0) == CUDA_SUCCESS);
    CHECK(drv.create(&h2, 2 * MiB, &pinned, 0) == CUDA_ERROR_OUT_OF_MEMORY);
    CHECK(drv.release(h1) == CUDA_SUCCESS);
    CHECK(drv.free_async(a, NULL) == CUDA_SUCCESS);
    /* All given back: the pool may take the whole cap again. */
    CHECK(drv.alloc(&b, 8 * MiB) == CUDA_SUCCESS);
    CHECK(drv.free(b) == CUDA_SUCCESS);
    CHECK(sim().used <= 8 * MiB);
    /* A reset frees everything: neither the pool's memory nor what was
     * passed on counts against the cap after it. */
    CHECK(drv.alloc_async(&a, 4 * MiB, NULL) == CUDA_SUCCESS); /* the 8 MiB go */
    CHECK(drv.alloc(&b, 4 * MiB) == CUDA_SUCCESS);
    CHECK(drv.reset(0) == CUDA_SUCCESS);
    CHECK(drv.alloc_async(&a, 4 * MiB, NULL) == CUDA_SUCCESS);
    CHECK(drv.alloc(&b, 4 * MiB) == CUDA_SUCCESS);
    CHECK(drv.free_async(a, NULL) == CUDA_SUCCESS);
    CHECK(drv.free(b) == CUDA_SUCCESS);
    printf("cap ok\n");
    return 0;
}

/* A program that looked for the runtime before loading it: the early
 * probe fails, and once the runtime is loaded the same entry serves; with
 * LAZY_LOCAL=1 the runtime is loaded RTLD_LOCAL, as a Python extension
 * loads it, out of RTLD_NEXT's sight: cupool finds it by its soname. */
static int lazy(void)
{
    typedef int (*malloc_fn)(void **, size_t);
    typedef int (*free_fn)(void *);
    malloc_fn m = (malloc_fn)dlsym(RTLD_DEFAULT, "cudaMalloc");
    CHECK(m); /* cupool's: the runtime is not loaded yet */
    void *p = NULL;
    CHECK(m(&p, MiB) != 0);
    /* The simulated runtime beside the simulated driver, by path: under
     * ASan, dlopen runs from the sanitizer's library and would not search
     * this program's run path. */
    Dl_info info;
    CHECK(dladdr((void *)cuInit, &info) && info.dli_fname);
    char rt[4096];
    snprintf(rt, sizeof(rt), "%.*s/libcudart.so.13",
             (int)(strrchr(info.dli_fname, '/') - info.dli_fname), info.dli_fname);
    bool local = getenv("LAZY_LOCAL") != NULL;
    CHECK(dlopen(rt, RTLD_NOW | (local ? RTLD_LOCAL : RTLD_GLOBAL)));
    m = (malloc_fn)dlsym(RTLD_DEFAULT, "cudaMalloc");
    free_fn fr = (free_fn)dlsym(RTLD_DEFAULT, "cudaFree");
    Dl_info where;
    CHECK(dladdr((void *)m, &where) && where.dli_fname);
    printf("cudaMalloc from %s\n", strrchr(where.dli_fname, '/') + 1);
    unsigned long before = sim().mallocs;
    for (int i = 0; i < 32; i++) {
        CHECK(m(&p, MiB) == 0 && p);
        CHECK(fr(p) == 0);
    }
    printf("driver allocations for 32 pairs: %lu\n", sim().mallocs - before);
    CHECK(sim().mallocs - before == 1);
    return 0;
}

/* A non-blocking stream created through the driver is ordered by the
 * fence: a block freed and then reused makes it wait. */
static int streams(void)
{
    load();
    CUstream s;
    CHECK(drv.stream_create(&s, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
    /* Two 1 MiB blocks fill a 2 MiB segment: the freed one can be reused
     * only through a fence. */
    CUdeviceptr a, b, c;
    CHECK(drv.alloc(&a, MiB) == CUDA_SUCCESS);
    CHECK(drv.alloc(&b, MiB) == CUDA_SUCCESS);
    CHECK(drv.free(a) == CUDA_SUCCESS);
    unsigned long records = sim().event_records;
    CHECK(drv.alloc(&c, MiB) == CUDA_SUCCESS && c == a);
    printf("events recorded by the fence: %lu\n", sim().event_records - records);
    CHECK(sim().event_records - records == 2); /* on s and on legacy */
    CHECK(drv.free(b) == CUDA_SUCCESS && drv.free(c) == CUDA_SUCCESS);
    CHECK(drv.stream_destroy(s) == CUDA_SUCCESS);
    return 0;
}

/* A capture begun through the driver: no fence is recorded into it; the
 * block is served from new memory instead, and after the capture the
 * fence comes back. */
static int capture(void)
{
    load();
    CUdeviceptr p, other;
    CHECK(drv.alloc(&p, MiB) == CUDA_SUCCESS);
    CHECK(drv.alloc(&other, MiB) == CUDA_SUCCESS);
    CHECK(drv.free(p) == CUDA_SUCCESS);
    CHECK(drv.begin_capture(CU_STREAM_LEGACY, CU_STREAM_CAPTURE_MODE_RELAXED) ==
          CUDA_SUCCESS);
    unsigned long rec = sim().legacy_records;
    CUdeviceptr q;
    CHECK(drv.alloc(&q, MiB) == CUDA_SUCCESS);
    CHECK(q != p); /* the freed block needs a fence it cannot have */
    CHECK(sim().legacy_records == rec);
    CUgraph g;
    CHECK(drv.end_capture(CU_STREAM_LEGACY, &g) == CUDA_SUCCESS);
    /* A global-mode capture forbids allocation on its thread: the driver's
     * own code, and the capture ends invalidated, as without cupool. */
    CUstream cs;
    CHECK(drv.stream_create(&cs, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
    CHECK(drv.begin_capture(cs, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
    CUdeviceptr no;
    CHECK(drv.alloc(&no, MiB) == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    CHECK(drv.free(other) == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    CHECK(drv.end_capture(cs, &g) == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    CHECK(drv.stream_destroy(cs) == CUDA_SUCCESS);
    CUdeviceptr r1, r2;
    CHECK(drv.alloc(&r1, MiB) == CUDA_SUCCESS); /* the clean rest of q's segment */
    CHECK(sim().legacy_records == rec);
    CHECK(drv.alloc(&r2, MiB) == CUDA_SUCCESS && r2 == p); /* fenced now */
    CHECK(sim().legacy_records > rec);
    printf("capture ok\n");
    return 0;
}

/* Resetting the primary context (a static runtime's cudaDeviceReset)
 * frees everything: the pool starts again, and frees nothing twice. */
static int reset(void)
{
    load();
    CUdeviceptr p;
    CHECK(drv.alloc(&p, MiB) == CUDA_SUCCESS);
    CHECK(drv.reset(0) == CUDA_SUCCESS);
    CHECK(sim().used == 0);
    churn(drv.alloc, drv.free);
    CHECK(sim().bad_frees == 0);
    printf("reset ok\n");
    return 0;
}

int main(int argc, char **argv)
{
    static const struct { const char *name; int (*fn)(void); } scenarios[] = {
        {"serve", serve}, {"plt", plt}, {"versions", versions}, {"cap", cap},
        {"create_refused", create_refused},
        {"lazy", lazy}, {"streams", streams}, {"capture", capture}, {"reset", reset},
    };
    for (size_t i = 0; argc > 1 && i < sizeof(scenarios) / sizeof(scenarios[0]); i++)
        if (!strcmp(argv[1], scenarios[i].name))
            return scenarios[i].fn();
    fprintf(stderr, "usage: drv_prog SCENARIO\n");
    return 2;
}
