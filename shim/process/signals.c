/* SPDX-License-Identifier: Apache-2.0 */
/*
 * signals.c - see signals.h.
 *
 * The program's disposition of each owned signal is kept as the words of a
 * struct sigaction under a sequence lock, so that cupool's handler can read
 * it on any thread without a lock: a writer makes the sequence odd, stores
 * the words, makes it even again. Writers (the interposed calls) are
 * serialised by a mutex and run with every signal blocked in their thread,
 * so no handler can interrupt them there; a handler on another thread
 * spins for the few stores a write takes. The SA_RESETHAND emulation is a
 * writer too: it wins the record with a compare-and-swap on the sequence.
 *
 * Nothing here is instrumented by ThreadSanitizer (NO_TSAN on every
 * function): that runtime defers the handlers it knows of, and this one it
 * does not (it is installed with the C library's sigaction), so it must
 * never enter the runtime; and the runtime calls sigaction itself while it
 * starts, before it could take a call from instrumented code. The handler
 * writes its byte with a raw system call for the same reason.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "log.h"
#include "symbols.h"
#include "signals.h"

#define EXPORT __attribute__((visibility("default")))
#define NO_TSAN __attribute__((no_sanitize_thread))

typedef void (*handler_fn)(int);

/* The C library's functions, reached past every interposer before it. */
#define SIGNAL_FUNCS(X)                                                       \
    X(int, sigaction, (int, const struct sigaction *, struct sigaction *))    \
    X(handler_fn, signal, (int, handler_fn))                                  \
    X(handler_fn, sysv_signal, (int, handler_fn))                             \
    X(handler_fn, sigset, (int, handler_fn))                                  \
    X(int, siginterrupt, (int, int))

static struct {
#define X_PTR(ret, name, params) ret(*name) params;
    SIGNAL_FUNCS(X_PTR)
#undef X_PTR
} libc;
static atomic_bool libc_found;

/* The C library's table, resolved; a missing entry stays NULL. Threads that
 * race here find the same pointers. No pthread_once: a sanitizer runtime
 * calls sigaction before its own interceptors (pthread_once's too) work. */
NO_TSAN static void libc_ready(void)
{
    if (atomic_load_explicit(&libc_found, memory_order_acquire))
        return;
#define X_FIND(ret, name, params) *(void **)&libc.name = shim_dlsym(RTLD_NEXT, #name);
    SIGNAL_FUNCS(X_FIND)
#undef X_FIND
    atomic_store_explicit(&libc_found, true, memory_order_release);
}

enum { REC_WORDS = (sizeof(struct sigaction) + sizeof(unsigned long) - 1) /
                   sizeof(unsigned long) };

typedef struct slot {
    _Atomic int sig;                          /* 0 = unused */
    _Atomic uint64_t seq;                     /* odd while rec changes */
    _Atomic unsigned long rec[REC_WORDS];     /* the program's sigaction */
} slot;

static slot slots[SHIM_SIGNALS_MAX];
static _Atomic int notify = -1;
static pthread_mutex_t write_lock = PTHREAD_MUTEX_INITIALIZER;

NO_TSAN static slot *find(int sig)
{
    for (int i = 0; sig > 0 && i < SHIM_SIGNALS_MAX; i++)
        if (atomic_load_explicit(&slots[i].sig, memory_order_relaxed) == sig)
            return &slots[i];
    return NULL;
}

NO_TSAN bool shim_signals_owns(int sig) { return find(sig) != NULL; }

NO_TSAN static bool has_handler(const struct sigaction *a)
{
    return a->sa_handler != SIG_DFL && a->sa_handler != SIG_IGN;
}

/* ---- the record ------------------------------------------------------------ */

NO_TSAN static void rec_put(slot *s, const struct sigaction *a)
{
    unsigned long w[REC_WORDS] = {0};
    memcpy(w, a, sizeof(*a));
    for (int i = 0; i < REC_WORDS; i++)
        atomic_store_explicit(&s->rec[i], w[i], memory_order_relaxed);
}

/* Copies the record as of an even sequence into *a; returns that sequence,
 * or 1 (odd) if no stable copy came within many tries. */
NO_TSAN static uint64_t rec_get(slot *s, struct sigaction *a)
{
    for (long tries = 0; tries < (1L << 24); tries++) {
        uint64_t q = atomic_load_explicit(&s->seq, memory_order_acquire);
        if (q & 1)
            continue;
        unsigned long w[REC_WORDS];
        for (int i = 0; i < REC_WORDS; i++)
            w[i] = atomic_load_explicit(&s->rec[i], memory_order_relaxed);
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&s->seq, memory_order_relaxed) == q) {
            memcpy(a, w, sizeof(*a));
            return q;
        }
    }
    return 1;
}

/* Replaces the record if its sequence is still q (even); false if another
 * writer came first. */
NO_TSAN static bool rec_swap(slot *s, uint64_t q, const struct sigaction *a)
{
    if (!atomic_compare_exchange_strong(&s->seq, &q, q + 1))
        return false;
    atomic_thread_fence(memory_order_release);
    rec_put(s, a);
    atomic_store_explicit(&s->seq, q + 2, memory_order_release);
    return true;
}

/* ---- the handler ------------------------------------------------------------- */

/* Resets the program's record to SIG_DFL (SA_RESETHAND) if it is still the
 * one read at q; true if this delivery won it and so calls the handler. */
NO_TSAN static bool reset_once(slot *s, uint64_t q)
{
    struct sigaction dfl;
    memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    return rec_swap(s, q, &dfl);
}

NO_TSAN static void on_signal(int sig, siginfo_t *info, void *uctx)
{
    int saved = errno;
    int fd = atomic_load_explicit(&notify, memory_order_relaxed);
    if (fd >= 0) {
        unsigned char b = (unsigned char)sig;
        long w = syscall(SYS_write, fd, &b, 1); /* a full pipe: already queued */
        (void)w;
    }
    slot *s = find(sig);
    struct sigaction prog;
    for (;;) {
        uint64_t q = s ? rec_get(s, &prog) : 1;
        if ((q & 1) || !has_handler(&prog))
            break;
        if ((prog.sa_flags & SA_RESETHAND) && !reset_once(s, q))
            continue; /* changed under us: read it again */
        errno = saved;
        if (prog.sa_flags & SA_SIGINFO)
            prog.sa_sigaction(sig, info, uctx);
        else
            prog.sa_handler(sig);
        saved = errno;
        break;
    }
    errno = saved;
}

/* Points the kernel at on_signal with the program's mask and the flags
 * that shape how the handler runs; without a program handler, cupool's own
 * (restart, nothing masked). */
NO_TSAN static int kernel_install(int sig, const struct sigaction *prog)
{
    struct sigaction k;
    memset(&k, 0, sizeof(k));
    k.sa_sigaction = on_signal;
    if (has_handler(prog)) {
        k.sa_flags = prog->sa_flags & (SA_RESTART | SA_ONSTACK | SA_NODEFER);
        k.sa_mask = prog->sa_mask;
    } else {
        k.sa_flags = SA_RESTART;
        sigemptyset(&k.sa_mask);
    }
    k.sa_flags |= SA_SIGINFO;
    return libc.sigaction(sig, &k, NULL);
}

/* ---- writers ------------------------------------------------------------------ */

typedef struct guard { sigset_t old; } guard;

NO_TSAN static void guard_enter(guard *g)
{
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &g->old);
    pthread_mutex_lock(&write_lock);
}

NO_TSAN static void guard_leave(guard *g)
{
    pthread_mutex_unlock(&write_lock);
    pthread_sigmask(SIG_SETMASK, &g->old, NULL);
}

/* Sets the program's disposition of an owned signal (act may be NULL: a
 * query) and returns the previous one in *old. The caller holds the guard. */
NO_TSAN static int owned_set(slot *s, const struct sigaction *act, struct sigaction *old)
{
    struct sigaction cur;
    uint64_t q;
    while ((q = rec_get(s, &cur)) & 1)
        ;
    if (act) {
        if (kernel_install(atomic_load(&s->sig), act) != 0)
            return -1;
        while (!rec_swap(s, q, act)) /* lost to a handler's reset */
            while ((q = rec_get(s, &cur)) & 1)
                ;
    }
    if (old)
        *old = cur;
    return 0;
}

NO_TSAN int shim_signals_take(const int *sigs, int n, int fd)
{
    libc_ready();
    if (!libc.sigaction)
        return 0;
    int taken = 0;
    for (int i = 0; i < n; i++) {
        if (!sigs[i] || find(sigs[i]))
            continue;
        slot *s = NULL;
        for (int k = 0; !s && k < SHIM_SIGNALS_MAX; k++)
            if (!atomic_load(&slots[k].sig))
                s = &slots[k];
        struct sigaction cur;
        if (!s || libc.sigaction(sigs[i], NULL, &cur) != 0 ||
            kernel_install(sigs[i], &cur) != 0) {
            shim_log(SHIM_LOG_WARN, "cannot handle signal %d: %s", sigs[i],
                     strerror(s ? errno : ENOSPC));
            continue;
        }
        rec_put(s, &cur);
        atomic_store(&s->sig, sigs[i]);
        taken++;
    }
    atomic_store(&notify, fd);
    return taken;
}

NO_TSAN void shim_signals_mute(void) { atomic_store(&notify, -1); }

NO_TSAN void shim_signals_helper_mask(void)
{
    sigset_t m;
    sigfillset(&m);
    for (int i = 0; i < SHIM_SIGNALS_MAX; i++)
        if (atomic_load(&slots[i].sig))
            sigdelset(&m, atomic_load(&slots[i].sig));
    pthread_sigmask(SIG_SETMASK, &m, NULL);
}

/* ---- the interposed calls -------------------------------------------------------- */

NO_TSAN EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    libc_ready();
    slot *s = find(sig);
    if (!s) {
        if (!libc.sigaction)
            return errno = ENOSYS, -1;
        return libc.sigaction(sig, act, old);
    }
    guard g;
    guard_enter(&g);
    int r = owned_set(s, act, old);
    guard_leave(&g);
    return r;
}

NO_TSAN EXPORT int __sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    return sigaction(sig, act, old);
}

/* signal() and its kin for an owned signal: flags and mask as the C
 * library gives them. */
NO_TSAN static handler_fn owned_signal(slot *s, handler_fn h, int flags, bool mask_self)
{
    if (h == SIG_ERR) {
        errno = EINVAL;
        return SIG_ERR;
    }
    struct sigaction a, old;
    memset(&a, 0, sizeof(a));
    a.sa_handler = h;
    a.sa_flags = flags;
    sigemptyset(&a.sa_mask);
    if (mask_self)
        sigaddset(&a.sa_mask, atomic_load(&s->sig));
    guard g;
    guard_enter(&g);
    int r = owned_set(s, &a, &old);
    guard_leave(&g);
    return r ? SIG_ERR : old.sa_handler;
}

/* A signal()-style call: for an owned signal, installs h with the C
 * library's flags and mask for that call; any other goes to the C
 * library's own (*pass). */
NO_TSAN static handler_fn signal_call(int sig, handler_fn h,
                                      handler_fn (*const *pass)(int, handler_fn),
                                      int flags, bool mask_self)
{
    libc_ready();
    slot *s = find(sig);
    if (!s)
        return *pass ? (*pass)(sig, h) : SIG_ERR;
    return owned_signal(s, h, flags, mask_self);
}

/* BSD semantics (glibc's signal): restart, the signal masked in its
 * handler; siginterrupt can take the restart away. */
NO_TSAN static handler_fn bsd(int sig, handler_fn h)
{
    return signal_call(sig, h, &libc.signal, SA_RESTART, true);
}

NO_TSAN EXPORT handler_fn signal(int sig, handler_fn h) { return bsd(sig, h); }
NO_TSAN EXPORT handler_fn bsd_signal(int sig, handler_fn h) { return bsd(sig, h); }
NO_TSAN EXPORT handler_fn ssignal(int sig, handler_fn h) { return bsd(sig, h); }

/* System V semantics: one-shot, not masked in its handler. */
NO_TSAN static handler_fn sysv(int sig, handler_fn h)
{
    return signal_call(sig, h, &libc.sysv_signal, SA_RESETHAND | SA_NODEFER, false);
}

NO_TSAN EXPORT handler_fn sysv_signal(int sig, handler_fn h) { return sysv(sig, h); }
NO_TSAN EXPORT handler_fn __sysv_signal(int sig, handler_fn h) { return sysv(sig, h); }

/* sigset: SIG_HOLD blocks the signal in the calling thread; anything else
 * installs it (no flags, empty mask) and unblocks it. Returns SIG_HOLD if
 * the signal was blocked, else the previous disposition. */
NO_TSAN EXPORT handler_fn sigset(int sig, handler_fn h)
{
    libc_ready();
    slot *s = find(sig);
    if (!s)
        return libc.sigset ? libc.sigset(sig, h) : SIG_ERR;
    sigset_t one, was;
    sigemptyset(&one);
    sigaddset(&one, sig);
    if (pthread_sigmask(SIG_BLOCK, NULL, &was) != 0)
        return SIG_ERR;
    bool held = sigismember(&was, sig);
    struct sigaction cur;
    if (h == SIG_HOLD) {
        sigaction(sig, NULL, &cur);
        pthread_sigmask(SIG_BLOCK, &one, NULL);
        return held ? SIG_HOLD : cur.sa_handler;
    }
    handler_fn prev = owned_signal(s, h, 0, false);
    if (prev == SIG_ERR)
        return SIG_ERR;
    pthread_sigmask(SIG_UNBLOCK, &one, NULL);
    return held ? SIG_HOLD : prev;
}

/* flag 1: the signal interrupts system calls (no SA_RESTART); 0: they
 * restart. */
NO_TSAN EXPORT int siginterrupt(int sig, int flag)
{
    libc_ready();
    slot *s = find(sig);
    if (!s)
        return libc.siginterrupt ? libc.siginterrupt(sig, flag) : (errno = ENOSYS, -1);
    guard g;
    guard_enter(&g);
    struct sigaction cur;
    int r = owned_set(s, NULL, &cur);
    if (!r) {
        if (flag)
            cur.sa_flags &= ~SA_RESTART;
        else
            cur.sa_flags |= SA_RESTART;
        r = owned_set(s, &cur, NULL);
    }
    guard_leave(&g);
    return r;
}
