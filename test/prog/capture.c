/* SPDX-License-Identifier: Apache-2.0 */
/*
 * capture.c - graph captures: no fence while one is open, and what cudaMalloc
 * and cudaFree answer during one in each mode.
 */
#include "prog.h"

#ifdef SIMCUDA
/* A capture in progress: no fence is issued, fresh memory is used. Once
 * it ended, fences come back, without the capture checks. */
static int capture(void)
{
    void *a, *b, *c, *d;
    cudaStream_t s;
    cudaGraph_t g;
    OK(cudaStreamCreate(&s));
    fill_segment(&a, &b);
    OK(cudaFree(a));
    OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    simcuda_stats s0 = sim(0);
    OK(cudaMalloc(&c, MIB));
    CHECK(c != a);
    CHECK(sim(0).event_records == s0.event_records);
    CHECK(sim(0).syncs == s0.syncs);
    CHECK(sim(0).mallocs == s0.mallocs + 1);
    CHECK(sim(0).capture_queries > s0.capture_queries); /* it looked */
    CHECK(cudaStreamEndCapture(s, &g) == cudaSuccess);
    CHECK(cudaStreamEndCapture(s, &g) != cudaSuccess); /* nothing to end */
    void *e;
    OK(cudaMalloc(&e, MIB)); /* the clean rest of c's segment */
    OK(cudaFree(c));
    s0 = sim(0);
    OK(cudaMalloc(&d, MIB)); /* only a and c, dirty, fit: fence */
    CHECK(d == a || d == c);
    CHECK(sim(0).legacy_records == s0.legacy_records + 1);
    CHECK(sim(0).capture_queries == s0.capture_queries);
    void *f;
    OK(cudaMalloc(&f, MIB)); /* the other of a and c, clean since the fence */
    /* A capture that failed to begin is not counted. */
    OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed) != cudaSuccess);
    OK(cudaStreamEndCapture(s, &g));
    OK(cudaFree(d));
    s0 = sim(0);
    OK(cudaMalloc(&d, MIB)); /* only d, dirty, fits: fence */
    CHECK(sim(0).legacy_records == s0.legacy_records + 1);
    CHECK(sim(0).capture_queries == s0.capture_queries);
    OK(cudaStreamDestroy(s));
    return 0;
}
#endif /* SIMCUDA */
/* Graph capture modes: what cudaMalloc and cudaFree answer while a
 * capture goes on, from the capturing thread and from another thread in
 * global and in relaxed mode, and how the capture ends. Prints one line of
 * CUDA's codes; test_shim and gpu-check compare it under cupool and with
 * CUPOOL_DISABLE=1 (CUDA alone): they must be the same. */
struct other_alloc { enum cudaStreamCaptureMode mode; cudaError_t got; void *p; };

static void *other_alloc_run(void *arg)
{
    struct other_alloc *o = arg;
    enum cudaStreamCaptureMode m = o->mode;
    cudaThreadExchangeStreamCaptureMode(&m);
    o->got = cudaMalloc(&o->p, MIB);
    cudaGetLastError();
    return NULL;
}

static cudaError_t alloc_on_other_thread(enum cudaStreamCaptureMode mode, void **p)
{
    struct other_alloc o = {mode, cudaSuccess, NULL};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, other_alloc_run, &o) == 0);
    pthread_join(t, NULL);
    *p = o.got == cudaSuccess ? o.p : NULL;
    return o.got;
}

static int capture_modes(void)
{
    cudaStream_t s;
    OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    void *held, *warm;
    OK(cudaMalloc(&warm, MIB));
    OK(cudaMalloc(&held, MIB));
    OK(cudaFree(warm)); /* a cached block the pool could hand out */
    static const struct { enum cudaStreamCaptureMode m; const char *name; } modes[] = {
        {cudaStreamCaptureModeGlobal, "global"},
        {cudaStreamCaptureModeThreadLocal, "thread-local"},
        {cudaStreamCaptureModeRelaxed, "relaxed"},
    };
    for (int i = 0; i < 3; i++) {
        void *q1, *q2, *p = NULL;
        cudaGraph_t g = NULL;
        OK(cudaStreamBeginCapture(s, modes[i].m));
        int r1 = alloc_on_other_thread(cudaStreamCaptureModeGlobal, &q1);
        int r2 = alloc_on_other_thread(cudaStreamCaptureModeRelaxed, &q2);
        int r3 = cudaMalloc(&p, MIB);
        cudaGetLastError();
        int r4 = cudaFree(held);
        cudaGetLastError();
        int r5 = cudaStreamEndCapture(s, &g);
        cudaGetLastError();
        printf("%s: other-global %d other-relaxed %d own-malloc %d own-free %d end %d%s",
               modes[i].name, r1, r2, r3, r4, r5, i < 2 ? " | " : "\n");
        if (g)
            cudaGraphDestroy(g);
        if (q1) OK(cudaFree(q1));
        if (q2) OK(cudaFree(q2));
        if (!r3 && p) OK(cudaFree(p));
        if (!r4)
            OK(cudaMalloc(&held, MIB));
    }
    OK(cudaFree(held));
    OK(cudaStreamDestroy(s));
    return 0;
}
#ifndef SIMCUDA
/* On a GPU: a reuse that needs a fence while a stream captures a graph
 * gets fresh memory, and the capture comes out whole and runs. */
static int capture_real(void)
{
    cudaStream_t s;
    OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    void *a, *b, *c;
    fill_segment(&a, &b);
    OK(cudaFree(a)); /* dirty: reusing it needs a fence */
    OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    OK(cudaMemsetAsync(b, 1, MIB, s));
    OK(cudaMalloc(&c, MIB));
    CHECK(c != a);
    cudaGraph_t g;
    OK(cudaStreamEndCapture(s, &g));
    cudaGraphExec_t e;
    OK(cudaGraphInstantiate(&e, g, 0));
    OK(cudaGraphLaunch(e, s));
    OK(cudaStreamSynchronize(s));
    unsigned char h = 0;
    OK(cudaMemcpy(&h, b, 1, cudaMemcpyDeviceToHost));
    CHECK(h == 1);
    printf("capture intact; the fence waited, fresh memory served\n");
    return 0;
}
#endif /* !SIMCUDA */

const prog_scenario prog_capture_scenarios[] = {
#ifdef SIMCUDA
    {"capture", capture},
#endif
#ifndef SIMCUDA
    {"capture_real", capture_real},
#endif
    {"capture_modes", capture_modes},
    {NULL, NULL},
};
