/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench_pool.c - CPU benchmarks of pool/ against the arithmetic backend.
 *
 *   pair_ns        median ns of one alloc+free pair of a cached 4 KiB block
 *   mix_ns_per_op  random mix: 55% allocations, sizes 512 B - 4 MiB
 *                  log-uniform, at most 4000 live; ns per operation
 *   logn_ratio     ns of an allocation with 100 000 free blocks in the pool
 *                  over ns with 10 free blocks (frees untimed); the same
 *                  ratio for timed alloc+free pairs is reported beside it
 *
 * Each figure is the median of REPS timed runs. Usage: bench_pool [--json]
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pool.h"
#include "sim_backend.h"

#define MIB ((size_t)1 << 20)
enum { REPS = 15 };

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return v[n / 2];
}

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1Dull;
}

static pool *open_pool(sim_backend *sim)
{
    pool_backend be;
    pool *p;
    sim_backend_init(sim, 0, &be);
    if (pool_create(NULL, &be, &p)) {
        fprintf(stderr, "bench_pool: pool_create failed\n");
        exit(1);
    }
    return p;
}

static void must(int err, const char *what)
{
    if (err) {
        fprintf(stderr, "bench_pool: %s failed: %s\n", what, pool_strerror(err));
        exit(1);
    }
}

static double bench_pair(void)
{
    sim_backend sim;
    pool *p = open_pool(&sim);
    uintptr_t a;
    enum { N = 200000 };
    double v[REPS];
    for (int r = 0; r < REPS; r++) {
        double t0 = now_ns();
        for (int i = 0; i < N; i++) {
            must(pool_alloc(p, 4096, &a), "alloc");
            must(pool_free(p, a), "free");
        }
        v[r] = (now_ns() - t0) / N;
    }
    pool_destroy(p);
    sim_backend_fini(&sim);
    return median(v, REPS);
}

static double bench_mix(void)
{
    enum { N = 400000, LIVE = 4000 };
    static uintptr_t live[LIVE];
    double v[REPS];
    for (int r = 0; r < REPS; r++) {
        sim_backend sim;
        pool *p = open_pool(&sim);
        uint64_t rng = 0xbe7c + (uint64_t)r;
        /* Sizes drawn ahead so the timer sees only the pool. */
        static size_t sizes[N];
        static uint8_t coin[N];
        for (int i = 0; i < N; i++) {
            double lg = 9.0 + 13.0 * (double)(rng_next(&rng) >> 11) / 9007199254740992.0;
            sizes[i] = (size_t)exp2(lg);
            coin[i] = rng_next(&rng) % 100 < 55;
        }
        int n = 0;
        double t0 = now_ns();
        for (int i = 0; i < N; i++) {
            if (n == 0 || (coin[i] && n < LIVE)) {
                must(pool_alloc(p, sizes[i], &live[n]), "alloc");
                n++;
            } else {
                int k = (int)(sizes[i] % (size_t)n);
                must(pool_free(p, live[k]), "free");
                live[k] = live[--n];
            }
        }
        v[r] = (now_ns() - t0) / N;
        pool_destroy(p);
        sim_backend_fini(&sim);
    }
    return median(v, REPS);
}

/* Allocation cost in a pool holding nfree free blocks (sizes 512 B to
 * 32 KiB, kept apart by live spacers). Each request asks for the size of a
 * random hole, so both pool sizes take the same path (exact fit, no split,
 * no coalescing) and differ only in how many free blocks are indexed.
 * Batches of BATCH allocations are timed; their frees, between batches, are
 * not. *pair_ns gets the cost of an alloc+free pair in the same pool. */
static double bench_alloc_with_free_blocks(int nfree, double *pair_ns)
{
    sim_backend sim;
    pool *p = open_pool(&sim);
    uint64_t rng = 0x10a;
    uintptr_t *hole = malloc((size_t)nfree * sizeof(*hole));
    size_t *hole_size = malloc((size_t)nfree * sizeof(*hole_size));
    uintptr_t spacer;
    for (int i = 0; i < nfree; i++) {
        hole_size[i] = 512 * (1 + rng_next(&rng) % 64);
        must(pool_alloc(p, hole_size[i], &hole[i]), "alloc");
        must(pool_alloc(p, 512, &spacer), "alloc");
    }
    for (int i = 0; i < nfree; i++)
        must(pool_free(p, hole[i]), "free");
    enum { BATCH = 8, ROUNDS = 20000 };
    static size_t req[BATCH * ROUNDS];
    for (int i = 0; i < BATCH * ROUNDS; i++)
        req[i] = hole_size[rng_next(&rng) % (uint64_t)nfree];
    uintptr_t a[BATCH];
    double v[REPS], w[REPS];
    for (int r = 0; r < REPS; r++) {
        double spent = 0;
        for (int k = 0; k < ROUNDS; k++) {
            double t0 = now_ns();
            for (int i = 0; i < BATCH; i++)
                must(pool_alloc(p, req[k * BATCH + i], &a[i]), "alloc");
            spent += now_ns() - t0;
            for (int i = 0; i < BATCH; i++)
                must(pool_free(p, a[i]), "free");
        }
        v[r] = spent / (BATCH * ROUNDS);
        double t0 = now_ns();
        for (int i = 0; i < BATCH * ROUNDS; i++) {
            must(pool_alloc(p, req[i], &a[0]), "alloc");
            must(pool_free(p, a[0]), "free");
        }
        w[r] = (now_ns() - t0) / (BATCH * ROUNDS);
    }
    free(hole);
    free(hole_size);
    pool_destroy(p);
    sim_backend_fini(&sim);
    *pair_ns = median(w, REPS);
    return median(v, REPS);
}

int main(int argc, char **argv)
{
    int json = argc > 1 && strcmp(argv[1], "--json") == 0;
    double pair = bench_pair();
    double mix = bench_mix();
    double few_pair, many_pair;
    double few = bench_alloc_with_free_blocks(10, &few_pair);
    double many = bench_alloc_with_free_blocks(100000, &many_pair);
    double ratio = many / few;
    if (json) {
        printf("{\"pair_ns\": %.1f, \"mix_ns_per_op\": %.1f, "
               "\"alloc_ns_10_free\": %.1f, \"alloc_ns_100000_free\": %.1f, "
               "\"logn_ratio\": %.2f, \"pair_ns_10_free\": %.1f, "
               "\"pair_ns_100000_free\": %.1f, \"logn_pair_ratio\": %.2f}\n",
               pair, mix, few, many, ratio, few_pair, many_pair,
               many_pair / few_pair);
        return 0;
    }
    printf("%-34s %10s %8s\n", "benchmark", "figure", "goal");
    printf("%-34s %10.1f %8s\n", "pair_ns (4 KiB alloc+free)", pair, "<= 100");
    printf("%-34s %10.1f %8s\n", "mix_ns_per_op (55% alloc, <=4000)", mix, "<= 150");
    printf("%-34s %10.1f %8s\n", "alloc ns, 10 free blocks", few, "");
    printf("%-34s %10.1f %8s\n", "alloc ns, 100000 free blocks", many, "");
    printf("%-34s %10.2f %8s\n", "logn_ratio (alloc)", ratio, "<= 2");
    printf("%-34s %10.1f %8s\n", "alloc+free ns, 10 free blocks", few_pair, "");
    printf("%-34s %10.1f %8s\n", "alloc+free ns, 100000 free blocks", many_pair, "");
    printf("%-34s %10.2f %8s\n", "logn_pair_ratio (alloc+free)",
           many_pair / few_pair, "");
    return 0;
}
