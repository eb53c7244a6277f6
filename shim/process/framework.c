/*
 * framework.c - see framework.h.
 *
 * CPython's C API is reached with dlsym on the process's global scope (the
 * python3 executable exports it; a program that embeds libpython loaded
 * it globally), never linked and never with Python's headers: the few
 * calls are declared here with PyObject as an opaque pointer.
 *
 * One request at a time (the helper thread serves flushes in turn). Its
 * state goes IDLE -> PENDING (asked) -> RUNNING (the main thread took it)
 * -> DONE, or PENDING -> WITHDRAWN when the wait ends first: a pending
 * call that runs after that finds the request withdrawn and does nothing,
 * as does one that runs in a forked child (another pid).
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "symbols.h"
#include "framework.h"
#include "process.h"

typedef void pyobj;

static struct {
    int (*IsInitialized)(void);
    int (*IsFinalizing)(void);  /* Py_IsFinalizing (3.13), _Py_IsFinalizing */
    int (*AddPendingCall)(int (*)(void *), void *);
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

/* The release, run with the GIL in the main thread. Each framework in its
 * own try: one that raises leaves the others and the program unharmed.
 * Only modules the program imported are touched (sys.modules), and torch
 * only once the program initialized CUDA through it. */
#define TORCH_CUDA                                                            \
    "import sys\n"                                                            \
    "t = sys.modules.get('torch')\n"                                          \
    "cuda = getattr(t, 'cuda', None) if t is not None else None\n"

static const char release_code[] =
    TORCH_CUDA
    "try:\n"
    "    if cuda is not None and cuda.is_initialized():\n"
    "        torch_seen = 1\n"
    "        devs = range(cuda.device_count())\n"
    "        before = sum(cuda.memory_reserved(d) for d in devs)\n"
    "        cuda.empty_cache()\n"
    "        cuda.ipc_collect()\n"
    "        torch = max(0, before - sum(cuda.memory_reserved(d) for d in devs))\n"
    "except Exception:\n"
    "    failed = 1\n"
    "c = sys.modules.get('cupy')\n"
    "try:\n"
    "    if c is not None:\n"
    "        cupy_seen = 1\n"
    "        pool = c.get_default_memory_pool()\n"
    "        before = pool.total_bytes()\n"
    "        pool.free_all_blocks()\n"
    "        c.get_default_pinned_memory_pool().free_all_blocks()\n"
    "        cupy = max(0, before - pool.total_bytes())\n"
    "except Exception:\n"
    "    failed = 1\n"
    "jax_seen = int('jax' in sys.modules)\n";

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

enum { IDLE, PENDING, RUNNING, DONE, WITHDRAWN };

/* What the main thread ran and read: a release (with the view after it)
 * or the view alone. */
typedef struct reading {
    shim_framework_result r;
    shim_framework_view v;
} reading;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t done_cond = PTHREAD_COND_INITIALIZER;
static atomic_int state = IDLE;
static bool releasing;               /* the request's kind; helper's */
static pid_t asker;                  /* the process that asked */
static reading out;                  /* written by the main thread while
                                        RUNNING, read after DONE */
static uint64_t asked_ns;            /* when the request went out */
static shim_framework_view last;     /* the newest view; guarded by lock */

#define RESOLVE(field, name) (*(void **)&py.field = shim_dlsym(RTLD_DEFAULT, name))

static void py_resolve_once(void)
{
    RESOLVE(IsInitialized, "Py_IsInitialized");
    RESOLVE(AddPendingCall, "Py_AddPendingCall");
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
    return py.AddPendingCall && py.IsInitialized && py.Run_StringFlags &&
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

/* The release's figures into r. GIL held. */
static void py_release(shim_framework_result *r)
{
    pyobj *g = py_run(release_code, r);
    if (!g)
        return;
    r->torch = py_get(g, "torch");
    r->cupy = py_get(g, "cupy");
    r->torch_seen = py_get(g, "torch_seen");
    r->cupy_seen = py_get(g, "cupy_seen");
    r->jax_seen = py_get(g, "jax_seen");
    py.DecRef(g);
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

/* The pending call: in the main thread, with the GIL, between bytecodes.
 * Always 0 with no exception set: the program's code goes on as if
 * nothing ran. */
static int pending_call(void *arg)
{
    (void)arg;
    int want = PENDING;
    if (getpid() != asker || !atomic_compare_exchange_strong(&state, &want, RUNNING))
        return 0; /* withdrawn, served, or a forked child's copy */
    reading x = {.r = {.status = SHIM_FW_DONE}};
    if (!py_running())
        x.r.status = SHIM_FW_NO_PYTHON;
    else if (releasing)
        py_release(&x.r), py_view(&x.v, &x.r);
    else
        py_view(&x.v, &x.r);
    pthread_mutex_lock(&lock);
    out = x;
    atomic_store(&state, DONE);
    pthread_cond_broadcast(&done_cond);
    pthread_mutex_unlock(&lock);
    return 0;
}

/* Asks the main thread to run a release (or the view alone): 0, or the
 * status that says why not. The state must be IDLE. */
static int ask(bool release)
{
    if (!shim_cfg.framework_flush)
        return SHIM_FW_OFF;
    if (!py_resolve() || !py_running())
        return SHIM_FW_NO_PYTHON;
    asker = getpid();
    releasing = release;
    asked_ns = shim_mono_ns();
    atomic_store(&state, PENDING);
    if (py.AddPendingCall(pending_call, NULL) != 0) {
        atomic_store(&state, IDLE);
        return SHIM_FW_REFUSED;
    }
    return 0;
}

/* Takes a finished request's reading: its view becomes the newest. Needs
 * lock and state DONE. */
static void collect_locked(shim_framework_result *r)
{
    if (r)
        *r = out.r;
    if (out.v.taken_ns)
        last = out.v;
    atomic_store(&state, IDLE);
}

/* Ends the request in flight, if any, within wait_ms: DONE is collected;
 * PENDING past the wait is withdrawn (SHIM_FW_LATE); RUNNING is waited
 * for to its end. Returns the request's status (SHIM_FW_DONE when none was
 * in flight), with its figures in *r. */
static shim_framework_status settle(int wait_ms, shim_framework_result *r)
{
    if (atomic_load(&state) == IDLE)
        return SHIM_FW_DONE;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += wait_ms / 1000;
    until.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L)
        until.tv_sec++, until.tv_nsec -= 1000000000L;
    pthread_mutex_lock(&lock);
    while (atomic_load(&state) != DONE) {
        int e = pthread_cond_timedwait(&done_cond, &lock, &until);
        int want = PENDING;
        if (e == ETIMEDOUT && atomic_compare_exchange_strong(&state, &want, WITHDRAWN)) {
            atomic_store(&state, IDLE);
            pthread_mutex_unlock(&lock);
            return SHIM_FW_LATE;
        }
        if (e == ETIMEDOUT) /* running: it ends soon, wait on */
            until.tv_sec += 1;
    }
    collect_locked(r);
    pthread_mutex_unlock(&lock);
    return r ? r->status : SHIM_FW_DONE;
}

void shim_framework_release(shim_framework_result *r)
{
    memset(r, 0, sizeof(*r));
    /* A view asked for earlier: its answer first (it is quick), or gone. */
    settle(SHIM_FRAMEWORK_WAIT_MS, NULL);
    int why = ask(true);
    if (why) {
        r->status = (shim_framework_status)why;
        return;
    }
    r->status = settle(SHIM_FRAMEWORK_WAIT_MS, r);
}

void shim_framework_view_now(void)
{
    settle(SHIM_FRAMEWORK_WAIT_MS, NULL);
    if (ask(false) == 0)
        settle(SHIM_FRAMEWORK_WAIT_MS, NULL);
}

bool shim_framework_view_ask(void)
{
    int s = atomic_load(&state);
    if (s == DONE || (s == PENDING && shim_mono_ns() - asked_ns >
                      (uint64_t)SHIM_FRAMEWORK_WAIT_MS * 1000000u))
        settle(0, NULL); /* collect, or withdraw what waited too long */
    if (atomic_load(&state) != IDLE)
        return true;
    pthread_mutex_lock(&lock);
    uint64_t age = shim_unix_ns() - last.taken_ns;
    pthread_mutex_unlock(&lock);
    return age >= 1000000000u && ask(false) == 0;
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
