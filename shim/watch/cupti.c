/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cupti.c - see cupti.h.
 *
 * CUPTI is loaded with dlopen only when asked for, so libcupool.so does not
 * depend on it. The callback runs on every driver call not listed in
 * quiet_calls, at its entry and at its return; it counts returns only,
 * and at the entry a stream owing its order pays (comm.h).
 */
#include <dlfcn.h>
#include <libgen.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <cupti_callbacks.h>
#include <cupti_driver_cbid.h>
#include <cupti_result.h>

#include "comm.h"
#include "config.h"
#include "driver.h"
#include "symbols.h"
#include "cupti.h"
#include "process.h"
#include "cudagate.h"
#include "real.h"
#include "log.h"

#define EXPORT __attribute__((visibility("default")))

static _Atomic uint64_t work;
static atomic_bool watching;
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* Starting and handing over, one at a time: the subscriber cupool holds
 * and how to let it go; whether the program took CUPTI. */
static pthread_mutex_t hand_lock = PTHREAD_MUTEX_INITIALIZER;
static void *cupti_lib;           /* cupool's dlopen of CUPTI */
static CUpti_SubscriberHandle held;
static CUptiResult (*let_go)(CUpti_SubscriberHandle);
static bool taken;                /* the program subscribed itself */

/* Driver calls that put nothing in a queue that could touch memory: they
 * ask, create, record an event or wait. The fence's own calls (event
 * record, stream wait, capture checks, device synchronize) and the shim's
 * cudaGetDevice are among them, so a fence does not count as new work.
 * The frequent ones are here also to spare them the callback. */
#define Q(name) CUPTI_DRIVER_TRACE_CBID_##name
static const CUpti_CallbackId quiet_calls[] = {
    Q(cuCtxGetCurrent), Q(cuCtxSetCurrent), Q(cuCtxGetDevice),
    Q(cuCtxGetDevice_v2), Q(cuCtxPushCurrent), Q(cuCtxPushCurrent_v2),
    Q(cuCtxPopCurrent), Q(cuCtxPopCurrent_v2), Q(cuCtxGetId), Q(cuCtxGetLimit),
    Q(cuCtxGetStreamPriorityRange), Q(cuDevicePrimaryCtxGetState),
    Q(cuDeviceGet), Q(cuDeviceGetAttribute), Q(cuDeviceGetCount),
    Q(cuDeviceGetName), Q(cuDeviceGetUuid), Q(cuDeviceGetUuid_v2),
    Q(cuDriverGetVersion), Q(cuGetProcAddress), Q(cuGetProcAddress_v2),
    Q(cuEventCreate), Q(cuEventDestroy), Q(cuEventDestroy_v2),
    Q(cuEventRecord), Q(cuEventRecord_ptsz), Q(cuEventRecordWithFlags),
    Q(cuEventRecordWithFlags_ptsz), Q(cuEventQuery), Q(cuEventSynchronize),
    Q(cuEventElapsedTime), Q(cuEventElapsedTime_v2),
    Q(cuStreamWaitEvent), Q(cuStreamWaitEvent_ptsz), Q(cuStreamQuery),
    Q(cuStreamQuery_ptsz), Q(cuStreamSynchronize), Q(cuStreamSynchronize_ptsz),
    Q(cuStreamIsCapturing), Q(cuStreamIsCapturing_ptsz),
    Q(cuStreamGetCaptureInfo), Q(cuStreamGetCaptureInfo_ptsz),
    Q(cuStreamGetCaptureInfo_v2), Q(cuStreamGetCaptureInfo_v2_ptsz),
    Q(cuStreamGetCaptureInfo_v3), Q(cuStreamGetCaptureInfo_v3_ptsz),
    Q(cuStreamGetFlags), Q(cuStreamGetPriority), Q(cuStreamGetId),
    Q(cuStreamGetCtx), Q(cuStreamGetCtx_v2), Q(cuThreadExchangeStreamCaptureMode),
    Q(cuCtxSynchronize), Q(cuCtxSynchronize_v2), Q(cuPointerGetAttribute),
    Q(cuPointerGetAttributes), Q(cuFuncGetAttribute), Q(cuKernelGetAttribute),
    Q(cuKernelGetName), Q(cuKernelGetFunction), Q(cuMemGetInfo),
    Q(cuMemGetInfo_v2), Q(cuMemGetAddressRange_v2),
    Q(cuOccupancyMaxActiveBlocksPerMultiprocessor),
    Q(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags),
    Q(cuOccupancyAvailableDynamicSMemPerBlock), Q(cuOccupancyMaxActiveClusters),
};
#undef Q

/* quiet_calls by id, filled before the subscriber is. CUPTI turns on
 * every call of the domain first and the quiet ones off after, one by one:
 * a quiet call that began in between was reported entering and never
 * returning, and its thread stayed counted inside a call for good (every
 * later pause waited for it, and its own later calls passed the closed
 * gate). So the callback ignores a quiet call wherever it reaches it. */
static bool quiet[CUPTI_DRIVER_TRACE_CBID_SIZE];

static void quiet_fill(void) /* under hand_lock, before any subscriber */
{
    static bool filled;
    if (filled)
        return;
    filled = true;
    for (size_t i = 0; i < sizeof(quiet_calls) / sizeof(quiet_calls[0]); i++)
        if (quiet_calls[i] < CUPTI_DRIVER_TRACE_CBID_SIZE)
            quiet[quiet_calls[i]] = true;
}

static void CUPTIAPI on_call(void *ud, CUpti_CallbackDomain domain,
                             CUpti_CallbackId id, const void *data)
{
    (void)ud, (void)domain;
    if (id < CUPTI_DRIVER_TRACE_CBID_SIZE && quiet[id])
        return;
    const CUpti_CallbackData *cd = data;
    bool entry = cd->callbackSite != CUPTI_API_EXIT;
    if (entry && !shim_inside)
        shim_cudagate_enter(); /* before the call does anything */
    if (!entry)
        atomic_fetch_add_explicit(&work, 1, memory_order_release);
    shim_comm_call(id, cd->functionParams, entry);
    if (!entry && !shim_inside)
        shim_cudagate_leave();
}

typedef CUptiResult (*subscribe_fn)(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *);
typedef CUptiResult (*unsubscribe_fn)(CUpti_SubscriberHandle);
typedef CUptiResult (*enable_domain_fn)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain);
typedef CUptiResult (*enable_callback_fn)(uint32_t, CUpti_SubscriberHandle,
                                          CUpti_CallbackDomain, CUpti_CallbackId);
typedef CUptiResult (*result_string_fn)(CUptiResult, const char **);

/* CUPOOL_CUPTI_LIB, else CUPTI by soname, beside the program's runtime,
 * then in the toolkit's usual places. */
static void *open_cupti(char *tried, size_t len)
{
    if (shim_cfg.cupti_lib[0]) {
        snprintf(tried, len, "%s", shim_cfg.cupti_lib);
        return dlopen(shim_cfg.cupti_lib, RTLD_NOW | RTLD_LOCAL);
    }
    char beside[SHIM_PATH_MAX] = "";
    Dl_info info;
    if (shim_real.cudaMalloc && dladdr((void *)shim_real.cudaMalloc, &info) &&
        info.dli_fname && strlen(info.dli_fname) < sizeof(beside) - 20) {
        char dir[SHIM_PATH_MAX];
        snprintf(dir, sizeof(dir), "%s", info.dli_fname);
        snprintf(beside, sizeof(beside), "%s/libcupti.so.13", dirname(dir));
    }
    const char *names[] = {"libcupti.so.13", "libcupti.so.12", "libcupti.so", beside,
                           "/usr/local/cuda/lib64/libcupti.so",
                           "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so"};
    snprintf(tried, len, "libcupti.so.13, .so.12, .so, beside libcudart, "
             "/usr/local/cuda");
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        void *h = names[i][0] ? dlopen(names[i], RTLD_NOW | RTLD_LOCAL) : NULL;
        if (h)
            return h;
    }
    return NULL;
}

static void start_locked(void)
{
    if (taken) { /* the program's profiler holds CUPTI: it keeps it */
        shim_log(SHIM_LOG_INFO, "CUPOOL_CUPTI: the program holds CUPTI (a profiler); "
                 "fencing as without it");
        return;
    }
    /* Under auto a missing or taken CUPTI is worth a word only when asked. */
    shim_log_level why_level = shim_cfg.cupti == SHIM_AUTO ? SHIM_LOG_INFO
                                                                   : SHIM_LOG_WARN;
    char tried[SHIM_PATH_MAX + 64];
    void *h = open_cupti(tried, sizeof(tried));
    if (!h) {
        shim_log(why_level, "CUPOOL_CUPTI: cannot load CUPTI (tried %s); "
                 "set CUPOOL_CUPTI_LIB to its path. Fencing as usual", tried);
        return;
    }
    subscribe_fn subscribe = (subscribe_fn)shim_dlsym(h, "cuptiSubscribe");
    unsubscribe_fn unsubscribe = (unsubscribe_fn)shim_dlsym(h, "cuptiUnsubscribe");
    enable_domain_fn enable_domain = (enable_domain_fn)shim_dlsym(h, "cuptiEnableDomain");
    enable_callback_fn enable_callback = (enable_callback_fn)shim_dlsym(h, "cuptiEnableCallback");
    result_string_fn result_string = (result_string_fn)shim_dlsym(h, "cuptiGetResultString");
    if (!subscribe || !unsubscribe || !enable_domain || !enable_callback || !result_string) {
        shim_log(SHIM_LOG_WARN, "CUPOOL_CUPTI: %s lacks the callback calls; "
                 "fencing as usual", tried);
        dlclose(h);
        return;
    }
    CUpti_SubscriberHandle sub;
    CUptiResult r = subscribe(&sub, (CUpti_CallbackFunc)on_call, NULL);
    const char *why = "?";
    if (r != CUPTI_SUCCESS) {
        result_string(r, &why);
        shim_log(why_level, "CUPOOL_CUPTI: CUPTI refused a subscriber (%s)%s; "
                 "fencing as usual", why,
                 r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
                     ? ": a profiler or another tool holds it" : "");
        return; /* CUPTI stays loaded: it may be the profiler's */
    }
    r = enable_domain(1, sub, CUPTI_CB_DOMAIN_DRIVER_API);
    if (r != CUPTI_SUCCESS) {
        result_string(r, &why);
        shim_log(SHIM_LOG_WARN, "CUPOOL_CUPTI: cannot watch the driver's calls "
                 "(%s); fencing as usual", why);
        unsubscribe(sub);
        return;
    }
    /* Off where CUPTI lets them be (the callback ignores them anyway). */
    for (size_t i = 0; i < sizeof(quiet_calls) / sizeof(quiet_calls[0]); i++)
        enable_callback(0, sub, CUPTI_CB_DOMAIN_DRIVER_API, quiet_calls[i]);
    cupti_lib = h;
    held = sub;
    let_go = unsubscribe;
    atomic_store(&watching, true);
    shim_comm_watching();
    shim_count(SHIM_cupti_starts);
    shim_log(SHIM_LOG_INFO, "CUPOOL_CUPTI: watching GPU work through CUPTI%s "
             "(a profiler that asks for CUPTI gets it)",
             shim_cfg.cupti == SHIM_AUTO ? " (fences came often after the program's "
                                                 "first NCCL call)" : "");
}

static void start(void)
{
    pthread_mutex_lock(&hand_lock);
    quiet_fill();
    start_locked();
    pthread_mutex_unlock(&hand_lock);
}

bool shim_work_watch(void)
{
    if (shim_cfg.cupti == SHIM_ON)
        pthread_once(&once, start);
    return atomic_load(&watching);
}

/* Under auto: whether the program made an NCCL call, and the fences begun
 * since. */
static atomic_bool nccl_seen;
static atomic_uint fences_since_nccl;

void shim_work_fence_due(void)
{
    if (shim_cfg.cupti != SHIM_AUTO ||
        !atomic_load_explicit(&nccl_seen, memory_order_relaxed) ||
        atomic_load_explicit(&fences_since_nccl, memory_order_relaxed) >= SHIM_WORK_AUTO_FENCES)
        return;
    atomic_fetch_add_explicit(&fences_since_nccl, 1, memory_order_relaxed);
}

void shim_work_start_due(void)
{
    if (atomic_load_explicit(&fences_since_nccl, memory_order_relaxed) >= SHIM_WORK_AUTO_FENCES)
        pthread_once(&once, start);
}

void shim_work_nccl_call(void)
{
    atomic_store_explicit(&nccl_seen, true, memory_order_relaxed);
    shim_work_start_due();
}

bool shim_work_watch_gate(const char **why)
{
    if (shim_cfg.cupti == SHIM_OFF) {
        *why = "CUPOOL_CUPTI=0: cupool does not watch the program's CUDA calls, so it "
               "cannot stop them";
        return false;
    }
    pthread_once(&once, start);
    if (atomic_load(&watching))
        return true;
    pthread_mutex_lock(&hand_lock);
    *why = taken ? "the program holds CUPTI (a profiler), which cupool needs to stop "
                   "its CUDA calls"
                 : "CUPTI could not be started (the log says why), which cupool needs "
                   "to stop the program's CUDA calls";
    pthread_mutex_unlock(&hand_lock);
    return false;
}

bool shim_work_watching(void)
{
    return atomic_load_explicit(&watching, memory_order_acquire);
}

uint64_t shim_work_count(void)
{
    return atomic_load_explicit(&work, memory_order_acquire);
}

/* ---- handing CUPTI to the program -----------------------------------------
 * CUPTI takes one subscriber per process (CUDA 13.0), and a profiler in
 * the program (torch.profiler's Kineto, a tool's injection) subscribes
 * itself. Its call comes here first: a preloaded definition interposes the
 * program's, and cupool's dlsym answers these names for a handle to CUPTI
 * (shim_cupti_answer). cupool stops watching, lets its subscriber go, and
 * the program's call goes on to CUPTI's own.
 *
 * Stopping is safe at any point: the flags fall before the subscriber is
 * let go, so work the callback no longer sees happens after they fell, and
 * a fence that reads them then neither skips nor leaves a stream out. */

static void give_up_locked(void)
{
    taken = true;
    if (!atomic_load(&watching))
        return;
    atomic_store(&watching, false);
    shim_comm_unwatching();
    CUptiResult r = let_go(held);
    shim_count(SHIM_cupti_handovers);
    shim_log(SHIM_LOG_INFO, "CUPOOL_CUPTI: the program asked for CUPTI (a profiler): "
             "cupool let it go%s and fences every stream from now on",
             r == CUPTI_SUCCESS ? "" : " (its unsubscribe failed)");
}

typedef CUptiResult (*subscribe_v2_fn)(CUpti_SubscriberHandle *, CUpti_CallbackFunc,
                                       void *, CUpti_SubscriberParams *);
static _Atomic(void *) real_subscribe, real_subscribe_v2;

/* CUPTI's own name: the one a handle gave (shim_cupti_answer), else the
 * next definition after cupool's, else a CUPTI already loaded. */
static void *cupti_own(_Atomic(void *) *slot, const char *name)
{
    static const char *const sonames[] = {"libcupti.so.13", "libcupti.so.12",
                                          "libcupti.so", NULL};
    void *f = atomic_load(slot);
    if (!f)
        f = shim_dlsym_loaded(name, sonames);
    pthread_mutex_lock(&hand_lock);
    if (!f && cupti_lib)
        f = shim_dlsym(cupti_lib, name);
    pthread_mutex_unlock(&hand_lock);
    return f;
}

/* The program's subscribe is due: CUPTI's own function for it (NULL if
 * none is loaded), cupool's subscriber let go first. */
static void *hand_over(_Atomic(void *) *slot, const char *name)
{
    void *f = cupti_own(slot, name);
    if (f) {
        /* Not while cupool's memory move needs CUPTI to hold the program's
         * calls: the subscriber waits at the gate until it opens. */
        shim_cudagate_enter();
        pthread_mutex_lock(&hand_lock);
        give_up_locked();
        pthread_mutex_unlock(&hand_lock);
        shim_cudagate_leave();
    }
    return f;
}

EXPORT CUptiResult cuptiSubscribe(CUpti_SubscriberHandle *sub, CUpti_CallbackFunc cb,
                                  void *ud);
EXPORT CUptiResult cuptiSubscribe(CUpti_SubscriberHandle *sub, CUpti_CallbackFunc cb,
                                  void *ud)
{
    subscribe_fn f = (subscribe_fn)hand_over(&real_subscribe, "cuptiSubscribe");
    return f ? f(sub, cb, ud) : CUPTI_ERROR_NOT_INITIALIZED;
}

EXPORT CUptiResult cuptiSubscribe_v2(CUpti_SubscriberHandle *sub, CUpti_CallbackFunc cb,
                                     void *ud, CUpti_SubscriberParams *params);
EXPORT CUptiResult cuptiSubscribe_v2(CUpti_SubscriberHandle *sub, CUpti_CallbackFunc cb,
                                     void *ud, CUpti_SubscriberParams *params)
{
    subscribe_v2_fn f = (subscribe_v2_fn)hand_over(&real_subscribe_v2, "cuptiSubscribe_v2");
    return f ? f(sub, cb, ud, params) : CUPTI_ERROR_NOT_INITIALIZED;
}

void *shim_cupti_answer(const char *name, void *f)
{
    if (!strcmp(name, "cuptiSubscribe")) {
        void *none = NULL;
        atomic_compare_exchange_strong(&real_subscribe, &none, f);
        return (void *)cuptiSubscribe;
    }
    if (!strcmp(name, "cuptiSubscribe_v2")) {
        void *none = NULL;
        atomic_compare_exchange_strong(&real_subscribe_v2, &none, f);
        return (void *)cuptiSubscribe_v2;
    }
    return f;
}
