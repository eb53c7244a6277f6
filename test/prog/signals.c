/* SPDX-License-Identifier: Apache-2.0 */
/*
 * signals.c - signals: cupool keeps its own, the program keeps its handlers;
 * threads under a storm of signals.
 */
#include "prog.h"

#include <sys/syscall.h>

/* ---- signals: cupool keeps its own, the program keeps its handlers ---- */
#ifdef SIMCUDA
/* Caches 8 segments, raises SIGUSR1 (process-directed: any thread that
 * does not block it takes it) and checks the driver got them all back
 * (within 30 s). A flush an earlier signal asked for runs on cupool's
 * thread when that thread gets the CPU, which on a loaded machine may be
 * after the segments were cached here: they are cached again until they
 * stay (each earlier signal takes them once at most). */
static void flushed_by_signal(void)
{
    void *p[8];
    for (int round = 0; round < 10 && sim(0).used < 8 * 4 * MIB; round++) {
        for (int i = 0; i < 8; i++)
            OK(cudaMalloc(&p[i], 3 * MIB));
        for (int i = 0; i < 8; i++)
            OK(cudaFree(p[i]));
    }
    CHECK(sim(0).used >= 8 * 4 * MIB);
    kill(getpid(), SIGUSR1);
    for (int i = 0; i < 3000 && sim(0).used; i++)
        sleep_ms(10);
    CHECK(sim(0).used == 0);
}

static void on_info(int sig, siginfo_t *info, void *uc)
{
    (void)uc;
    if (sig == SIGUSR1 && info && info->si_signo == SIGUSR1)
        atomic_fetch_add(&own_calls, 1);
}

/* The program installs its own SIGUSR1 handler after cupool, through
 * SIG_API (sigaction, siginfo, signal, bsd_signal, sysv_signal, sigset):
 * both the flush and the handler happen, once each, and a query answers
 * with the program's handler. */
static int sig_chain(void)
{
    const char *api = getenv("SIG_API");
    CHECK(api);
    void (*want)(int) = on_own;
    if (!strcmp(api, "sigaction")) {
        struct sigaction sa = {.sa_handler = on_own};
        CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);
    } else if (!strcmp(api, "siginfo")) {
        struct sigaction sa = {.sa_sigaction = on_info, .sa_flags = SA_SIGINFO};
        CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);
        want = (void (*)(int))(void (*)(void))on_info;
    } else if (!strcmp(api, "signal")) {
        CHECK(signal(SIGUSR1, on_own) == SIG_DFL);
    } else if (!strcmp(api, "bsd_signal")) {
        CHECK(bsd_signal(SIGUSR1, on_own) == SIG_DFL);
    } else if (!strcmp(api, "sysv_signal")) {
        CHECK(sysv_signal(SIGUSR1, on_own) == SIG_DFL);
    } else if (!strcmp(api, "sigset")) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
        CHECK(sigset(SIGUSR1, on_own) == SIG_DFL);
#pragma GCC diagnostic pop
    } else {
        CHECK(!"unknown SIG_API");
    }
    struct sigaction q;
    CHECK(sigaction(SIGUSR1, NULL, &q) == 0);
    CHECK(q.sa_handler == want);
    flushed_by_signal();
    for (int i = 0; i < 3000 && atomic_load(&own_calls) == 0; i++)
        sleep_ms(10);
    printf("%s: flushed, own handler calls: %d\n", api, atomic_load(&own_calls));
    CHECK(atomic_load(&own_calls) == 1);
    return 0;
}

/* SIG_IGN and SIG_DFL set by the program: the flush happens and the
 * process lives on; a query answers with what the program set. Also
 * SIGUSR1 ignored by the parent before exec (INHERITED_IGN=1). */
static int sig_dispositions(void)
{
    struct sigaction q;
    if (getenv("INHERITED_IGN")) {
        CHECK(sigaction(SIGUSR1, NULL, &q) == 0);
        CHECK(q.sa_handler == SIG_IGN);
        flushed_by_signal();
    }
    void (*const disp[])(int) = {SIG_IGN, SIG_DFL};
    for (int k = 0; k < 2; k++) {
        CHECK(signal(SIGUSR1, disp[k]) != SIG_ERR);
        CHECK(sigaction(SIGUSR1, NULL, &q) == 0);
        CHECK(q.sa_handler == disp[k]);
        flushed_by_signal();
    }
    puts("flushed under SIG_IGN and SIG_DFL, still alive");
    return 0;
}

/* Every program thread blocks SIGUSR1: it still reaches cupool. */
static int sig_blocked(void)
{
    sigset_t m;
    sigemptyset(&m);
    sigaddset(&m, SIGUSR1);
    CHECK(pthread_sigmask(SIG_BLOCK, &m, NULL) == 0);
    flushed_by_signal();
    puts("flushed while every program thread blocks SIGUSR1");
    return 0;
}

static atomic_int usr2_masked;
static void on_flagged(int sig)
{
    (void)sig;
    sigset_t cur;
    pthread_sigmask(SIG_BLOCK, NULL, &cur);
    atomic_store(&usr2_masked, sigismember(&cur, SIGUSR2));
    atomic_fetch_add(&own_calls, 1);
}

static pthread_t main_thread;
static pid_t main_tid;

/* Whether thread tid of this process sleeps in the system call nr (its
 * /proc syscall line: the number first; "running" when it runs, which
 * must not read as 0, read's number on x86-64). */
static bool sleeps_in(pid_t tid, long nr)
{
    char path[64], line[256], *end = line;
    snprintf(path, sizeof(path), "/proc/self/task/%d/syscall", (int)tid);
    FILE *f = fopen(path, "r");
    if (!f) /* no such file here: a fixed wait instead */
        return sleep_ms(200), true;
    bool in = fgets(line, sizeof(line), f) && strtol(line, &end, 10) == nr && end != line;
    fclose(f);
    return in;
}

/* Signals the main thread once it is blocked in its read (up to 60 s: a
 * fixed 200 ms came before the read on a loaded machine, and the read
 * then never saw the signal). */
static void *poke_main(void *arg)
{
    (void)arg;
    for (int i = 0; i < 60000 && !sleeps_in(main_tid, SYS_read); i++)
        sleep_ms(1);
    pthread_kill(main_thread, SIGUSR1);
    return NULL;
}

/* Ends the read after 60 s if the signal did not (the test then fails
 * instead of hanging). */
static atomic_int read_over;
static void *unstick(void *arg)
{
    for (int i = 0; i < 6000 && !atomic_load(&read_over); i++)
        sleep_ms(10);
    if (!atomic_load(&read_over)) {
        ssize_t w = write(*(int *)arg, "x", 1);
        (void)w;
    }
    return NULL;
}

/* The program's own flags and mask hold: without SA_RESTART a read()
 * ends with EINTR; its mask (SIGUSR2) is in force in its handler; with
 * SA_RESETHAND the handler runs once and the query then says SIG_DFL, yet
 * the next SIGUSR1 still flushes and does not end the process. */
static int sig_flags(void)
{
    struct sigaction sa = {.sa_handler = on_flagged, .sa_flags = 0};
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGUSR2);
    CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);
    void *p;
    OK(cudaMalloc(&p, MIB)); /* starts the helper */
    int fds[2];
    CHECK(pipe(fds) == 0);
    main_thread = pthread_self();
    main_tid = gettid();
    pthread_t t1, t2;
    CHECK(pthread_create(&t1, NULL, poke_main, NULL) == 0);
    CHECK(pthread_create(&t2, NULL, unstick, &fds[1]) == 0);
    char c;
    ssize_t r = read(fds[0], &c, 1);
    int e = errno;
    atomic_store(&read_over, 1);
    printf("read: %zd (%s), handler calls %d, SIGUSR2 masked in it: %d\n", r,
           r < 0 ? strerror(e) : "data", atomic_load(&own_calls), atomic_load(&usr2_masked));
    CHECK(r == -1 && e == EINTR);
    CHECK(atomic_load(&own_calls) == 1 && atomic_load(&usr2_masked) == 1);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    OK(cudaFree(p));
    sa.sa_flags = SA_RESETHAND;
    CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);
    flushed_by_signal();
    for (int i = 0; i < 3000 && atomic_load(&own_calls) < 2; i++)
        sleep_ms(10);
    struct sigaction q;
    CHECK(sigaction(SIGUSR1, NULL, &q) == 0);
    CHECK(q.sa_handler == SIG_DFL);
    flushed_by_signal();
    sleep_ms(100);
    printf("SA_RESETHAND: handler calls %d, still alive\n", atomic_load(&own_calls));
    CHECK(atomic_load(&own_calls) == 2);
    return 0;
}

/* A forked child's signals stay its own: SIGUSR1 and SIGUSR2 sent to the
 * child neither flush the parent's pools nor dump its statistics (the
 * parent's stats file, CUPOOL_STATS_FILE with %p, stays absent). */
static int sig_fork(void)
{
    void *p[4];
    for (int i = 0; i < 4; i++)
        OK(cudaMalloc(&p[i], 3 * MIB));
    for (int i = 0; i < 4; i++)
        OK(cudaFree(p[i]));
    unsigned long long held = sim(0).used;
    CHECK(held >= 4 * 4 * MIB);
    pid_t c = fork();
    if (c == 0) {
        kill(getpid(), SIGUSR1);
        kill(getpid(), SIGUSR2);
        sleep_ms(300);
        _exit(0);
    }
    int st;
    CHECK(waitpid(c, &st, 0) == c && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    sleep_ms(300);
    printf("after the child's signals the parent holds %llu of %llu\n", sim(0).used, held);
    CHECK(sim(0).used == held);
    char path[512];
    stats_path(path, sizeof(path));
    CHECK(access(path, F_OK) != 0);
    return 0;
}
#endif /* SIMCUDA */
/* Eight threads allocate, stamp, check and free while another thread
 * sends flush and statistics signals by the thousand. A block handed out
 * twice shows up as a stamp overwritten by another thread. */
enum { THREADS = 8, ROUNDS = 3000, SIGNALS = 4000 };
static atomic_int failures, running;

static void *worker(void *arg)
{
    uint64_t id = (uint64_t)(uintptr_t)arg, rng = id * 7919 + 1;
    for (int r = 0; r < ROUNDS; r++) {
        uint64_t *p[4];
        size_t n[4];
        for (int k = 0; k < 4; k++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            n[k] = 64 + (rng >> 33) % (64 * 1024);
            if (cudaMalloc((void **)&p[k], n[k] * 8) != cudaSuccess) {
                atomic_fetch_add(&failures, 1);
                n[k] = 0;
                continue;
            }
            for (size_t i = 0; i < n[k]; i += 97)
                p[k][i] = id << 32 | (uint64_t)r;
        }
        for (int k = 0; k < 4; k++) {
            for (size_t i = 0; i < n[k]; i += 97)
                if (p[k][i] != (id << 32 | (uint64_t)r))
                    atomic_fetch_add(&failures, 1);
            if (n[k] && cudaFree(p[k]) != cudaSuccess)
                atomic_fetch_add(&failures, 1);
        }
    }
    atomic_fetch_sub(&running, 1);
    return NULL;
}

static int threads(void)
{
#ifndef SIMCUDA
    puts("threads: host-writable memory needed; simulated runtime only");
    return 0;
#else
    pthread_t t[THREADS];
    atomic_store(&running, THREADS);
    for (uintptr_t i = 0; i < THREADS; i++)
        CHECK(pthread_create(&t[i], NULL, worker, (void *)(i + 1)) == 0);
    int sent = 0;
    while (atomic_load(&running) > 0 || sent < SIGNALS) {
        kill(getpid(), sent % 2 ? SIGUSR2 : SIGUSR1);
        sent++;
        if (sent % 64 == 0)
            sleep_ms(1);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    printf("signals sent: %d, failures: %d\n", sent, atomic_load(&failures));
    CHECK(atomic_load(&failures) == 0);
    return 0;
#endif
}

const prog_scenario prog_signals_scenarios[] = {
#ifdef SIMCUDA
    {"sig_chain", sig_chain},
    {"sig_dispositions", sig_dispositions},
    {"sig_blocked", sig_blocked},
    {"sig_flags", sig_flags},
    {"sig_fork", sig_fork},
#endif
    {"threads", threads},
    {NULL, NULL},
};
