/* SPDX-License-Identifier: Apache-2.0 */
/*
 * framework.c - see framework.h.
 *
 * CPython's C API is reached with dlsym on the process's global scope (the
 * python3 executable exports it; a program that embeds libpython loaded
 * it globally), never linked and never with Python's headers: the few
 * calls are declared here with PyObject as an opaque pointer.
 *
 * One worker thread, started at the first request, runs one job at a
 * time: a flush, or a reading of PyTorch's figures. The helper asks
 * (asked++) and waits for done to reach its number, or gives up: the job
 * then runs anyway, and the worker rings the helper's doorbell when it
 * has. The worker may die with the interpreter (a thread that asks for
 * the GIL while it finalizes is ended by CPython) or wait forever for a
 * lock held in a long call: nothing of cupool's is held meanwhile, and
 * later flushes return cupool's own cache themselves (control.c).
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "capture.h"
#include "device.h"
#include "symbols.h"
#include "framework.h"
#include "process.h"

typedef void pyobj;

static struct {
    int (*IsInitialized)(void);
    int (*IsFinalizing)(void);  /* Py_IsFinalizing (3.13), _Py_IsFinalizing */
    int (*GILState_Ensure)(void);
    void (*GILState_Release)(int);
    pyobj *(*Dict_New)(void);
    pyobj *(*Eval_GetBuiltins)(void);
    int (*Dict_SetItemString)(pyobj *, const char *, pyobj *);
    pyobj *(*Dict_GetItemString)(pyobj *, const char *);
    pyobj *(*Run_StringFlags)(const char *, int, pyobj *, pyobj *, void *);
    long long (*Long_AsLongLong)(pyobj *);
    void (*DecRef)(pyobj *);
    void (*Err_Clear)(void);
} py;

enum { PY_FILE_INPUT = 257 }; /* Py_file_input */

/* torch.cuda, once the program imported torch (never imported here). */
#define TORCH_CUDA                                                            \
    "import sys\n"                                                            \
    "t = sys.modules.get('torch')\n"                                          \
    "cuda = getattr(t, 'cuda', None) if t is not None else None\n"

/* What each release runs first, with the GIL: want (see framework.h), the
 * framework's module as m (None unless the program imported it: found in
 * sys.modules, never imported), and worth(unused, held). */
static const char release_prelude[] =
    "want = %llu\n"
    "import sys\n"
    "m = sys.modules.get('%s')\n"
    "def worth(unused, held):\n"
    "    return want == 0 or (unused > 0 and unused >= min(want, held // 2))\n";

/* The frameworks a flush knows, released in this order. Each release is
 * Python run after the prelude, in a namespace of its own: one that
 * raises leaves the others and the program unharmed. It sets seen = 1 if
 * the program uses the framework, released to the bytes its cache gave
 * back, skipped = 1 if that cache was not worth releasing for want; it
 * touches no device the framework does not use. A framework without a
 * release is one whose memory cannot be given back from outside: seen
 * when imported, named in the flush's line (stats.h's
 * STATS_FRAMEWORKS_UNABLE). */
typedef struct framework {
    int which;            /* SHIM_FRAMEWORK_<name>, or -1 without a release */
    const char *module;   /* what the program imports */
    const char *name;     /* for a framework without a release */
    const char *release;  /* Python, or NULL */
} framework;

static const framework frameworks[] = {
    /* Once the program initialized CUDA through PyTorch; empty_cache with
     * each device it holds memory on current in this thread (expandable
     * segments unmap on the current device), never one it does not use. */
    {SHIM_FRAMEWORK_torch, "torch", NULL,
     "cuda = getattr(m, 'cuda', None) if m is not None else None\n"
     "if cuda is not None and cuda.is_initialized():\n"
     "    seen = 1\n"
     "    devs = [d for d in range(cuda.device_count()) if cuda.memory_reserved(d)]\n"
     "    before = sum(cuda.memory_reserved(d) for d in devs)\n"
     "    if worth(before - sum(cuda.memory_allocated(d) for d in devs), before):\n"
     "        for d in devs:\n"
     "            with cuda.device(d):\n"
     "                cuda.empty_cache()\n"
     "        cuda.ipc_collect()\n"
     "    else:\n"
     "        skipped = 1\n"
     "    released = max(0, before - sum(cuda.memory_reserved(d) for d in devs))\n"},
    {SHIM_FRAMEWORK_cupy, "cupy", NULL,
     "if m is not None:\n"
     "    seen = 1\n"
     "    pool = m.get_default_memory_pool()\n"
     "    before = pool.total_bytes()\n"
     "    if worth(before - pool.used_bytes(), before):\n"
     "        pool.free_all_blocks()\n"
     "        m.get_default_pinned_memory_pool().free_all_blocks()\n"
     "    released = max(0, before - pool.total_bytes())\n"},
    /* Its empty_cache releases the idle cache of every device it uses;
     * not called while it holds no GPU memory. */
    {SHIM_FRAMEWORK_paddle, "paddle", NULL,
     "cuda = getattr(getattr(m, 'device', None), 'cuda', None)\n"
     "if cuda is not None and cuda.device_count():\n"
     "    seen = 1\n"
     "    devs = [d for d in range(cuda.device_count()) if cuda.memory_reserved(d)]\n"
     "    before = sum(cuda.memory_reserved(d) for d in devs)\n"
     "    if not worth(before - sum(cuda.memory_allocated(d) for d in devs), before):\n"
     "        skipped = 1\n"
     "    elif devs:\n"
     "        cuda.empty_cache()\n"
     "    released = max(0, before - sum(cuda.memory_reserved(d) for d in devs))\n"},
    {-1, "jax", "JAX", NULL},
};

_Static_assert(sizeof(frameworks) / sizeof(frameworks[0]) == SHIM_NFRAMEWORKS + 1,
               "a row here for each of stats.h's STATS_FRAMEWORKS, and JAX's");

/* PyTorch's own figures per device (after the release, when both run):
 * a<d> allocated, r<d> reserved, i<d> inactive split bytes. */
static const char view_code[] =
    TORCH_CUDA
    "try:\n"
    "    if cuda is not None and cuda.is_initialized():\n"
    "        view_seen = 1\n"
    "        for d in range(min(cuda.device_count(), 64)):\n"
    "            globals()['a%d' % d] = cuda.memory_allocated(d)\n"
    "            globals()['r%d' % d] = cuda.memory_reserved(d)\n"
    "            globals()['i%d' % d] = cuda.memory_stats(d).get(\n"
    "                'inactive_split_bytes.all.current', 0)\n"
    "except Exception:\n"
    "    failed = 1\n";

/* What a job ran and read: a flush (with the view after it) or the view
 * alone. */
typedef struct reading {
    shim_framework_result r;
    shim_framework_view v;
} reading;

enum job { JOB_VIEW = 1, JOB_FLUSH = 2 };

/* The worker's state; everything under lock. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;  /* the worker's */
static pthread_cond_t done_cond = PTHREAD_COND_INITIALIZER;
static pid_t worker_pid;          /* the process whose worker runs */
static uint64_t asked, taken, done; /* job numbers: asked, run, finished */
static int job_kind;              /* of job `asked` (JOB_*) */
static uint64_t job_want;         /* its want */
static uint64_t job_asked_ns;     /* when it was asked */
static shim_framework_wait waiting; /* what the running job waits for */
static uint64_t abandoned;        /* the newest job whose asker gave up */
static reading out;               /* job `done`'s */
static bool landed;               /* out is a late flush's, not collected */
static shim_framework_view last;  /* the newest view */

#define RESOLVE(field, name) (*(void **)&py.field = shim_dlsym(RTLD_DEFAULT, name))

static void py_resolve_once(void)
{
    RESOLVE(IsInitialized, "Py_IsInitialized");
    RESOLVE(GILState_Ensure, "PyGILState_Ensure");
    RESOLVE(GILState_Release, "PyGILState_Release");
    RESOLVE(Dict_New, "PyDict_New");
    RESOLVE(Eval_GetBuiltins, "PyEval_GetBuiltins");
    RESOLVE(Dict_SetItemString, "PyDict_SetItemString");
    RESOLVE(Dict_GetItemString, "PyDict_GetItemString");
    RESOLVE(Run_StringFlags, "PyRun_StringFlags");
    RESOLVE(Long_AsLongLong, "PyLong_AsLongLong");
    RESOLVE(DecRef, "Py_DecRef");
    RESOLVE(Err_Clear, "PyErr_Clear");
    if (!RESOLVE(IsFinalizing, "Py_IsFinalizing"))
        RESOLVE(IsFinalizing, "_Py_IsFinalizing");
}

/* Resolves the C API once: true if the process holds an interpreter. */
static bool py_resolve(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, py_resolve_once);
    return py.GILState_Ensure && py.GILState_Release && py.IsInitialized && py.Run_StringFlags &&
           py.Dict_New && py.Eval_GetBuiltins && py.Dict_SetItemString &&
           py.Dict_GetItemString && py.Long_AsLongLong && py.DecRef && py.Err_Clear;
}

/* Whether the interpreter runs now: initialized, not finalizing. */
static bool py_running(void)
{
    return py.IsInitialized() && !(py.IsFinalizing && py.IsFinalizing());
}

/* g[name] as a non-negative integer, or 0. GIL held. */
static uint64_t py_get(pyobj *g, const char *name)
{
    pyobj *v = py.Dict_GetItemString(g, name); /* borrowed */
    if (!v)
        return 0;
    long long n = py.Long_AsLongLong(v);
    py.Err_Clear();
    return n > 0 ? (uint64_t)n : 0;
}

/* Runs code in a fresh namespace and returns the namespace (NULL after
 * a failure, r->failed set). GIL held. */
static pyobj *py_run(const char *code, shim_framework_result *r)
{
    pyobj *g = py.Dict_New();
    if (!g || py.Dict_SetItemString(g, "__builtins__", py.Eval_GetBuiltins()) != 0) {
        py.Err_Clear();
        r->failed = true;
        if (g)
            py.DecRef(g);
        return NULL;
    }
    pyobj *res = py.Run_StringFlags(code, PY_FILE_INPUT, g, g, NULL);
    if (res)
        py.DecRef(res);
    else
        r->failed = true;
    py.Err_Clear(); /* never leave the program an exception */
    r->failed |= py_get(g, "failed") != 0;
    return g;
}

/* Runs f's release (or, without one, looks for its module); its figures
 * into r. GIL held. */
static void py_release_one(const framework *f, shim_framework_result *r, uint64_t want)
{
    static const char seen_only[] = "seen = int(m is not None)\n";
    const char *body = f->release ? f->release : seen_only;
    char code[sizeof(release_prelude) + 64 + 2048];
    int n = snprintf(code, sizeof(code), release_prelude, (unsigned long long)want, f->module);
    if (n < 0 || (size_t)n + strlen(body) >= sizeof(code)) {
        r->failed = true;
        return;
    }
    memcpy(code + n, body, strlen(body) + 1);
    pyobj *g = py_run(code, r);
    if (!g)
        return;
    bool seen = py_get(g, "seen") != 0;
    if (f->which < 0) {
        r->unable = seen ? f->name : r->unable;
    } else {
        r->seen[f->which] = seen;
        r->released[f->which] = py_get(g, "released");
        r->skipped |= py_get(g, "skipped") != 0;
    }
    py.DecRef(g);
}

/* Every framework's release, in the table's order. GIL held. */
static void py_release(shim_framework_result *r, uint64_t want)
{
    for (size_t i = 0; i < sizeof(frameworks) / sizeof(frameworks[0]); i++)
        py_release_one(&frameworks[i], r, want);
}

/* PyTorch's own figures into v (v->taken_ns stays 0 without them). GIL
 * held. */
static void py_view(shim_framework_view *v, shim_framework_result *r)
{
    pyobj *g = py_run(view_code, r);
    if (!g)
        return;
    if (py_get(g, "view_seen")) {
        for (int d = 0; d < SHIM_MAX_DEVICES; d++) {
            char k[16];
            snprintf(k, sizeof(k), "a%d", d);
            v->allocated[d] = py_get(g, k);
            snprintf(k, sizeof(k), "r%d", d);
            v->reserved[d] = py_get(g, k);
            snprintf(k, sizeof(k), "i%d", d);
            v->inactive[d] = py_get(g, k);
        }
        v->taken_ns = shim_unix_ns();
    }
    py.DecRef(g);
}


/* ---- the worker ---------------------------------------------------------------- */

static void waiting_set(shim_framework_wait w)
{
    pthread_mutex_lock(&lock);
    waiting = w;
    pthread_mutex_unlock(&lock);
}

/* Whether cupool's own cache is worth returning for want (framework.h). */
static bool own_worth(uint64_t want)
{
    uint64_t cached = 0, reserved = 0;
    for (int i = 0; i < SHIM_MAX_DEVICES; i++) {
        pool_stats ps;
        if (shim_device_stats(i, &ps))
            cached += ps.cached, reserved += ps.reserved;
    }
    return cached > 0 && (!want || cached >= (want < reserved / 2 ? want : reserved / 2));
}

/* Takes the GIL (when python) with no capture open and the gate closed;
 * returns the GIL state to give back. */
static int gate_and_gil(bool python, shim_framework_result *r)
{
    for (;;) {
        waiting_set(SHIM_FW_WAIT_CAPTURE);
        r->deferred |= shim_capture_gate_wait();
        waiting_set(SHIM_FW_WAIT_GIL);
        int gil = python ? py.GILState_Ensure() : 0;
        /* Closed only with the GIL held: a capturing thread that holds
         * it cannot be waiting at the gate meanwhile. */
        if (shim_capture_gate_close()) {
            waiting_set(SHIM_FW_WAIT_NONE);
            return gil;
        }
        if (python)
            py.GILState_Release(gil);
    }
}

static void run_flush(reading *x, uint64_t want)
{
    bool python = shim_cfg.framework_flush && py_resolve() && py_running();
    x->r.status = !shim_cfg.framework_flush ? SHIM_FW_OFF
                  : python ? SHIM_FW_DONE : SHIM_FW_NO_PYTHON;
    int gil = gate_and_gil(python, &x->r);
    if (python) {
        if (py_running()) {
            py_release(&x->r, want);
            py_view(&x->v, &x->r);
        } else {
            x->r.status = SHIM_FW_NO_PYTHON;
        }
        py.GILState_Release(gil);
    }
    uint64_t released = 0;
    for (int i = 0; i < SHIM_NFRAMEWORKS; i++)
        released += x->r.released[i];
    if (released > 0 || own_worth(want))
        x->r.own = shim_device_flush_all();
    else
        x->r.skipped = want != 0;
    shim_capture_gate_open();
}

static void run_view(reading *x)
{
    x->r.status = SHIM_FW_DONE;
    if (!py_resolve() || !py_running()) {
        x->r.status = SHIM_FW_NO_PYTHON;
        return;
    }
    waiting_set(SHIM_FW_WAIT_GIL);
    int gil = py.GILState_Ensure();
    waiting_set(SHIM_FW_WAIT_NONE);
    if (py_running())
        py_view(&x->v, &x->r);
    py.GILState_Release(gil);
}

static void *worker(void *arg)
{
    (void)arg;
    sigset_t all; /* the program's signals are for its own threads */
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    pthread_mutex_lock(&lock);
    for (;;) {
        while (taken == asked)
            pthread_cond_wait(&wake, &lock);
        uint64_t n = taken = asked, want = job_want, t0 = job_asked_ns;
        int kind = job_kind;
        pthread_mutex_unlock(&lock);
        reading x;
        memset(&x, 0, sizeof(x));
        if (kind == JOB_FLUSH)
            run_flush(&x, want);
        else
            run_view(&x);
        x.r.took_ns = shim_mono_ns() - t0;
        pthread_mutex_lock(&lock);
        out = x;
        done = n;
        if (x.v.taken_ns)
            last = x.v;
        bool ring = kind == JOB_FLUSH && abandoned == n;
        landed |= ring;
        pthread_cond_broadcast(&done_cond);
        if (ring) {
            unsigned char b = SHIM_WAKE_LANDED;
            ssize_t w = write(shim_doorbell_wr(), &b, 1); /* full: woken already */
            (void)w;
        }
    }
    return NULL;
}

/* Asks for a job of kind (with want), joining one queued or running that
 * does as much: the number of the job to wait for, or 0 if the worker
 * cannot start. Needs lock. */
static uint64_t submit_locked(int kind, uint64_t want)
{
    if (worker_pid != getpid()) {
        pthread_t t;
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        int err = pthread_create(&t, &a, worker, NULL);
        pthread_attr_destroy(&a);
        if (err)
            return 0;
        worker_pid = getpid();
        asked = taken = done = abandoned = 0;
        landed = false;
    }
    if (asked > taken) { /* queued: widen it */
        job_want = job_kind == JOB_FLUSH && kind == JOB_FLUSH ? stats_want_merge(job_want, want)
                   : kind == JOB_FLUSH ? want : job_want;
        job_kind = kind > job_kind ? kind : job_kind;
        return asked;
    }
    if (done < taken && (kind == JOB_VIEW || (job_kind == JOB_FLUSH && (!job_want || want))))
        return taken; /* running, and does as much */
    asked++;
    job_kind = kind;
    job_want = want;
    job_asked_ns = shim_mono_ns();
    pthread_cond_signal(&wake);
    return asked;
}

/* Waits for job n at most wait_ms: true once done (out is its or a later
 * one's). Needs lock. */
static bool wait_locked(uint64_t n, int wait_ms)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += wait_ms / 1000;
    until.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L)
        until.tv_sec++, until.tv_nsec -= 1000000000L;
    while (done < n)
        if (pthread_cond_timedwait(&done_cond, &lock, &until) == ETIMEDOUT)
            break;
    return done >= n;
}

void shim_framework_flush(uint64_t want, shim_framework_result *r)
{
    memset(r, 0, sizeof(*r));
    pthread_mutex_lock(&lock);
    uint64_t n = submit_locked(JOB_FLUSH, want);
    if (!n) {
        pthread_mutex_unlock(&lock);
        r->status = SHIM_FW_LATE; /* no worker: the caller flushes its own */
        r->waiting = SHIM_FW_WAIT_THREAD;
        return;
    }
    if (wait_locked(n, SHIM_FRAMEWORK_WAIT_MS)) {
        *r = out.r;
        landed = false; /* counted here */
    } else {
        r->status = SHIM_FW_LATE;
        r->waiting = waiting;
        abandoned = n > abandoned ? n : abandoned;
    }
    pthread_mutex_unlock(&lock);
}

bool shim_framework_landed(shim_framework_result *r)
{
    pthread_mutex_lock(&lock);
    bool was = landed;
    if (was)
        *r = out.r;
    landed = false;
    pthread_mutex_unlock(&lock);
    return was;
}

void shim_framework_view_now(void)
{
    if (!shim_cfg.framework_flush || !py_resolve() || !py_running())
        return;
    pthread_mutex_lock(&lock);
    uint64_t n = submit_locked(JOB_VIEW, 0);
    if (n)
        wait_locked(n, SHIM_FRAMEWORK_WAIT_MS);
    pthread_mutex_unlock(&lock);
}

bool shim_framework_view_ask(void)
{
    if (!shim_cfg.framework_flush || !py_resolve() || !py_running())
        return false;
    pthread_mutex_lock(&lock);
    bool coming = worker_pid == getpid() && done < asked;
    if (!coming && shim_unix_ns() - last.taken_ns >= 1000000000u)
        coming = submit_locked(JOB_VIEW, 0) != 0;
    pthread_mutex_unlock(&lock);
    return coming;
}

void shim_framework_view_get(shim_framework_view *v)
{
    pthread_mutex_lock(&lock);
    *v = last;
    pthread_mutex_unlock(&lock);
}

bool shim_framework_ending(void)
{
    static atomic_bool ran; /* the interpreter was seen running */
    if (!py_resolve())
        return false;
    if (py.IsFinalizing && py.IsFinalizing())
        return true;
    if (py.IsInitialized()) {
        atomic_store(&ran, true);
        return false;
    }
    return atomic_load(&ran); /* finalized */
}
