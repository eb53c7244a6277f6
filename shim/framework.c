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
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "driver.h"
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
static const char release_code[] =
    "import sys\n"
    "t = sys.modules.get('torch')\n"
    "cuda = getattr(t, 'cuda', None) if t is not None else None\n"
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

enum { IDLE, PENDING, RUNNING, DONE, WITHDRAWN };

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t done_cond = PTHREAD_COND_INITIALIZER;
static atomic_int state = IDLE;
static pid_t asker;                  /* the process that asked */
static shim_framework_result out;    /* written by the main thread while
                                        RUNNING, read after DONE */

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

/* Runs release_code in a fresh namespace and reads its figures into r.
 * GIL held. */
static void py_release(shim_framework_result *r)
{
    pyobj *g = py.Dict_New();
    if (!g || py.Dict_SetItemString(g, "__builtins__", py.Eval_GetBuiltins()) != 0) {
        py.Err_Clear();
        r->failed = true;
        if (g)
            py.DecRef(g);
        return;
    }
    pyobj *res = py.Run_StringFlags(release_code, PY_FILE_INPUT, g, g, NULL);
    if (res)
        py.DecRef(res);
    else
        r->failed = true;
    py.Err_Clear(); /* never leave the program an exception */
    r->torch = py_get(g, "torch");
    r->cupy = py_get(g, "cupy");
    r->torch_seen = py_get(g, "torch_seen");
    r->cupy_seen = py_get(g, "cupy_seen");
    r->jax_seen = py_get(g, "jax_seen");
    r->failed |= py_get(g, "failed") != 0;
    py.DecRef(g);
}

/* The pending call: in the main thread, with the GIL, between bytecodes.
 * Always 0 with no exception set: the program's code goes on as if
 * nothing ran. */
static int pending_release(void *arg)
{
    (void)arg;
    int want = PENDING;
    if (getpid() != asker || !atomic_compare_exchange_strong(&state, &want, RUNNING))
        return 0; /* withdrawn, served, or a forked child's copy */
    shim_framework_result r = {.status = SHIM_FW_DONE};
    if (py_running())
        py_release(&r);
    else
        r.status = SHIM_FW_NO_PYTHON;
    pthread_mutex_lock(&lock);
    out = r;
    atomic_store(&state, DONE);
    pthread_cond_broadcast(&done_cond);
    pthread_mutex_unlock(&lock);
    return 0;
}

void shim_framework_release(shim_framework_result *r)
{
    memset(r, 0, sizeof(*r));
    if (!shim_cfg.framework_flush) {
        r->status = SHIM_FW_OFF;
        return;
    }
    if (!py_resolve() || !py_running()) {
        r->status = SHIM_FW_NO_PYTHON;
        return;
    }
    asker = getpid();
    atomic_store(&state, PENDING);
    if (py.AddPendingCall(pending_release, NULL) != 0) {
        atomic_store(&state, IDLE);
        r->status = SHIM_FW_REFUSED;
        return;
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += SHIM_FRAMEWORK_WAIT_MS / 1000;
    until.tv_nsec += (long)(SHIM_FRAMEWORK_WAIT_MS % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L)
        until.tv_sec++, until.tv_nsec -= 1000000000L;
    pthread_mutex_lock(&lock);
    while (atomic_load(&state) != DONE) {
        int e = pthread_cond_timedwait(&done_cond, &lock, &until);
        int want = PENDING;
        if (e == ETIMEDOUT && atomic_compare_exchange_strong(&state, &want, WITHDRAWN)) {
            pthread_mutex_unlock(&lock);
            r->status = SHIM_FW_LATE;
            return;
        }
        if (e == ETIMEDOUT) /* running: it ends soon, wait on */
            until.tv_sec += 1;
    }
    *r = out;
    atomic_store(&state, IDLE);
    pthread_mutex_unlock(&lock);
}
