/* SPDX-License-Identifier: Apache-2.0 */
/*
 * trace.c - CUPOOL_TRACE: a child inheriting it, threads swapping blocks, a
 * loop ended by a signal.
 */
#include "prog.h"

/* CUPOOL_TRACE inherited by a child: 1000 pairs, a child run with the same
 * environment (rt_prog zero, or with TC_SHELL=1 a shell through system()),
 * 1000 pairs more. Prints the pairs made, for the replay to compare. */
static int tracechild(void)
{
    unsigned long n = 0;
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < 1000; i++, n++) {
            void *p;
            OK(cudaMalloc(&p, 4096 + (size_t)(i % 5) * 512));
            OK(cudaFree(p));
        }
        if (round)
            break;
        if (getenv("TC_SHELL")) {
            CHECK(system("echo hi >/dev/null") == 0);
        } else {
            char *argv[] = {"rt_prog", "zero", NULL};
            pid_t c;
            CHECK(posix_spawn(&c, "/proc/self/exe", NULL, NULL, argv, environ) == 0);
            int st;
            CHECK(waitpid(c, &st, 0) == c && WIFEXITED(st) && WEXITSTATUS(st) == 0);
        }
    }
    printf("pairs %lu\n", n);
    return 0;
}

/* CUPOOL_TRACE: threads swap blocks through shared slots, so most frees
 * happen on another thread than the allocation, and each thread makes far
 * more records than its ring holds. Prints what the program did, for the
 * test to compare with the replayed trace. */
enum { TM_THREADS = 4, TM_ROUNDS = 20000, TM_SLOTS = 256 };
typedef struct tm_block { void *p; size_t size; } tm_block;
static _Atomic(tm_block *) tm_slot[TM_SLOTS];
static atomic_ulong tm_allocs, tm_frees, tm_fail;

static void *tm_worker(void *arg)
{
    uint64_t rng = (uint64_t)(uintptr_t)arg * 0x9E3779B97F4A7C15ull + 1;
    for (int r = 0; r < TM_ROUNDS; r++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        tm_block *b = malloc(sizeof(*b));
        b->size = 1 + (rng >> 33) % (256 * 1024);
        if (cudaMalloc(&b->p, b->size) != cudaSuccess) {
            atomic_fetch_add(&tm_fail, 1);
            free(b);
            continue;
        }
        atomic_fetch_add(&tm_allocs, 1);
        tm_block *old = atomic_exchange(&tm_slot[(rng >> 13) % TM_SLOTS], b);
        if (old) {
            if (cudaFree(old->p) != cudaSuccess)
                atomic_fetch_add(&tm_fail, 1);
            atomic_fetch_add(&tm_frees, 1);
            free(old);
        }
    }
    return NULL;
}

static int tracemix(void)
{
    pthread_t t[TM_THREADS];
    for (uintptr_t i = 0; i < TM_THREADS; i++)
        CHECK(pthread_create(&t[i], NULL, tm_worker, (void *)(i + 1)) == 0);
    for (int i = 0; i < TM_THREADS; i++)
        pthread_join(t[i], NULL);
    /* One flush, recorded and replayed. cupool's helper makes it when it
     * next runs, which on a loaded machine can be after the program would
     * have ended: a 64 MiB segment left free shows when it has (the
     * simulated driver's count; cudaMemGetInfo under cupool counts its
     * cache as free). */
    void *big;
    CHECK(cudaMalloc(&big, 64u << 20) == cudaSuccess && cudaFree(big) == cudaSuccess);
    atomic_fetch_add(&tm_allocs, 1);
    atomic_fetch_add(&tm_frees, 1);
#ifdef SIMCUDA
    unsigned long long before = sim(0).used;
    kill(getpid(), SIGUSR1);
    for (int i = 0; i < 6000 && sim(0).used + (64u << 20) > before; i++)
        sleep_ms(10);
    if (sim(0).used + (64u << 20) > before)
        printf("the signal's flush did not give back the free 64 MiB segment within 60 s "
               "(in use %llu bytes before it, %llu after)\n", before, sim(0).used);
    CHECK(sim(0).used + (64u << 20) <= before);
#else
    kill(getpid(), SIGUSR1);
    sleep_ms(100);
#endif
    size_t live = 0, bytes = 0;
    for (int i = 0; i < TM_SLOTS; i++) {
        tm_block *b = atomic_load(&tm_slot[i]);
        if (b) {
            live++;
            bytes += (b->size + 511) / 512 * 512;
        }
    }
    printf("allocs %lu frees %lu live %zu bytes %zu\n", atomic_load(&tm_allocs),
           atomic_load(&tm_frees), live, bytes);
    CHECK(atomic_load(&tm_fail) == 0);
    return 0;
}

/* CUPOOL_TRACE and signals: TL_THREADS threads (default 1) allocate and
 * free without end, counting each successful call in the shared file
 * COUNTER (two words: allocs, frees) after it returns, until a signal ends
 * the program. Installs no handler of its own. FSIZE_LIMIT set: files may
 * not grow past 64 KiB, so the trace's writes fail. */
static _Atomic uint64_t *tl_count;

static void *tl_worker(void *arg)
{
    (void)arg;
    void *p[8] = {0};
    for (uint64_t i = 0;; i++) {
        void **slot = &p[i % 8];
        if (*slot) {
            OK(cudaFree(*slot));
            atomic_fetch_add(&tl_count[1], 1);
        }
        OK(cudaMalloc(slot, 512 * (1 + i % 64)));
        atomic_fetch_add(&tl_count[0], 1);
    }
    return NULL;
}

static int traceloop(void)
{
    const char *path = getenv("COUNTER"), *ready = getenv("READY");
    const char *nt = getenv("TL_THREADS");
    int threads = nt ? atoi(nt) : 1;
    CHECK(path && ready && threads >= 1 && threads <= 16);
    if (getenv("FSIZE_LIMIT")) { /* make the trace's writes fail */
        struct rlimit rl = {64 * 1024, 64 * 1024};
        signal(SIGXFSZ, SIG_IGN);
        CHECK(setrlimit(RLIMIT_FSIZE, &rl) == 0);
    }
    int fd = open(path, O_RDWR | O_CREAT, 0600);
    CHECK(fd >= 0 && ftruncate(fd, 16) == 0);
    tl_count = mmap(NULL, 16, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(tl_count != MAP_FAILED);
    pthread_t t;
    for (int i = 1; i < threads; i++)
        CHECK(pthread_create(&t, NULL, tl_worker, NULL) == 0);
    FILE *f = fopen(ready, "w");
    CHECK(f);
    fclose(f);
    tl_worker(NULL);
    return 0;
}

const prog_scenario prog_trace_scenarios[] = {
    {"tracemix", tracemix},
    {"traceloop", traceloop},
    {"tracechild", tracechild},
    {NULL, NULL},
};
