/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stats.c - statistics: the signals' output, fragmentation named, a program
 * holding known amounts for cupool stat and flush, exec.
 */
#include "prog.h"

/* This process's CUPOOL_STATS_FILE (which must hold %p) into path. */
void stats_path(char *path, size_t len)
{
    const char *pat = getenv("CUPOOL_STATS_FILE");
    CHECK(pat && strstr(pat, "%p"));
    size_t k = (size_t)(strstr(pat, "%p") - pat);
    snprintf(path, len, "%.*s%d%s", (int)k, pat, (int)getpid(), pat + k + 2);
}

/* SIGUSR2 writes one JSON line to CUPOOL_STATS_FILE (%p = pid). */
static int stats(void)
{
    void *a, *b;
    OK(cudaMalloc(&a, 1000));
    OK(cudaMalloc(&b, 3 * MIB));
    char path[512];
    stats_path(path, sizeof(path));
    raise(SIGUSR2);
    for (int i = 0; i < 3000; i++) {
        FILE *f = fopen(path, "r");
        char line[16384];
        if (f && fgets(line, sizeof(line), f) && strchr(line, '\n')) {
            fclose(f);
            return 0;
        }
        if (f)
            fclose(f);
        sleep_ms(10);
    }
    CHECK(!"no statistics line within 30 s");
    return 1;
}

/* Under a cap, half-used small segments leave enough free bytes in total
 * but no block for a larger request: the report must say fragmentation. */
static int frag(void)
{
    void *p[8];
    for (int i = 0; i < 8; i++)
        OK(cudaMalloc(&p[i], 900 * 1024));
    for (int i = 0; i < 8; i += 2)
        OK(cudaFree(p[i]));
    void *big;
    CHECK(cudaMalloc(&big, 3 * MIB / 2) == cudaErrorMemoryAllocation);
    return 0;
}

/* Holds known amounts (1000 B and 3 MiB live, a 6 MiB segment cached),
 * touches $READY, and waits for SIGTERM up to 120 s (`serve SECONDS`: that
 * long); then prints how many
 * segments the driver saw freed. For cupool stat / flush from outside. */
volatile sig_atomic_t stop;
void on_term(int sig) { (void)sig; stop = 1; }
atomic_int own_calls;
void on_own(int sig) { (void)sig; atomic_fetch_add(&own_calls, 1); }

static int serve(void)
{
    struct sigaction sa = {.sa_handler = on_term};
    sigaction(SIGTERM, &sa, NULL);
    if (getenv("OWN_HANDLER")) /* the program's own SIGUSR1, after cupool's */
        signal(SIGUSR1, on_own);
    void *a, *b, *c;
    OK(cudaMalloc(&a, 1000));
    OK(cudaMalloc(&b, 3 * MIB));
    OK(cudaMalloc(&c, 5 * MIB));
    OK(cudaFree(c));
    void *comm = NULL;
#ifdef SIMCUDA
    if (getenv("SERVE_NCCL")) { /* a communicator, as a job using NCCL has */
        int dev = 0;
        CHECK(((int (*)(void **, int, const int *))nccl("ncclCommInitAll"))(&comm, 1, &dev) == 0);
    }
#endif
    const char *ready = getenv("READY");
    FILE *f = ready ? fopen(ready, "w") : NULL;
    if (f)
        fclose(f);
    for (int i = 0, n = hold_ticks(120); i < n && !stop; i++)
        sleep_ms(10);
#ifdef SIMCUDA
    if (comm)
        CHECK(((int (*)(void *))nccl("ncclCommDestroy"))(comm) == 0);
#else
    (void)comm;
#endif
#ifdef SIMCUDA
    printf("driver frees: %lu\n", sim(0).frees);
#endif
    printf("own handler calls: %d\n", atomic_load(&own_calls));
    return 0;
}

/* Allocates, touches $READY, then becomes /bin/sleep 3 (the same pid, no
 * longer under cupool's control: its page is stale). */
static int execsleep(void)
{
    void *p;
    OK(cudaMalloc(&p, MIB));
    sleep_ms(300); /* the helper has made the page */
    const char *ready = getenv("READY");
    FILE *f = ready ? fopen(ready, "w") : NULL;
    if (f)
        fclose(f);
    execl("/bin/sleep", "sleep", "60", (char *)NULL); /* the test kills it */
    CHECK(!"exec failed");
    return 1;
}

const prog_scenario prog_stats_scenarios[] = {
    {"serve", serve},
    {"stats", stats},
    {"frag", frag},
    {"execsleep", execsleep},
    {NULL, NULL},
};
