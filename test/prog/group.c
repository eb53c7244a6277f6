/* SPDX-License-Identifier: Apache-2.0 */
/*
 * group.c - CUPOOL_GROUP: phases taken in turn, turns waited for, a racing
 * budget.
 */
#include "prog.h"

/* Waits up to 120 s for file path to exist (a test's deadline is its
 * own): 0, or -1. */
static int wait_path(const char *path)
{
    for (int i = 0; i < 12000; i++) {
        if (access(path, F_OK) == 0)
            return 0;
        usleep(10000);
    }
    return -1;
}

/* Phases taken in turn with another process (test_shim's group tests):
 * PHASES phases of PHASE_MIB MiB each, in 4 MiB blocks allocated and
 * freed (the cache keeps them). After its phase n a process touches
 * $PHASE_DIR/<PHASE_ME>.<n>; the first (PHASE_FIRST=1) waits for the
 * other's n-1 before phase n, the second for the other's n. Prints what
 * each phase got; exit 0 if every phase got all of it. */
static int phases(void)
{
    const char *dir = getenv("PHASE_DIR"), *me = getenv("PHASE_ME"),
               *other = getenv("PHASE_OTHER");
    int n = atoi(getenv("PHASES") ? getenv("PHASES") : "4");
    int blocks = atoi(getenv("PHASE_MIB") ? getenv("PHASE_MIB") : "60") / 4;
    bool first = getenv("PHASE_FIRST") && atoi(getenv("PHASE_FIRST"));
    char path[512];
    void *p[256];
    int ok = 0;
    for (int k = 0; k < n; k++) {
        snprintf(path, sizeof(path), "%s/%s.%d", dir, other, first ? k - 1 : k);
        if ((k > 0 || !first) && wait_path(path)) {
            printf("phase %d: the other process never finished its phase\n", k);
            return 1;
        }
        int got = 0;
        while (got < blocks && got < 256 && cudaMalloc(&p[got], 4 * MIB) == cudaSuccess)
            got++;
        printf("phase %d: %d of %d blocks\n", k, got, blocks);
        ok += got == blocks;
        for (int i = 0; i < got; i++)
            cudaFree(p[i]);
        snprintf(path, sizeof(path), "%s/%s.%d", dir, me, k);
        close(open(path, O_WRONLY | O_CREAT, 0600));
    }
    fflush(stdout);
    return ok == n ? 0 : 1;
}

static uint64_t unix_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Allocates mib MiB in one block into *p after touching
 * $TURN_DIR/<TURN_ME>.<tag>: 0, or -1 (said with the time it took). */
static int turn_take(void **p, int mib, const char *tag)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s.%s", getenv("TURN_DIR"), getenv("TURN_ME"), tag);
    close(open(path, O_WRONLY | O_CREAT, 0600));
    uint64_t t0 = unix_ns();
    if (cudaMalloc(p, (size_t)mib * MIB) == cudaSuccess)
        return 0;
    printf("refused after %lu ms\n", (unsigned long)((unix_ns() - t0) / 1000000u));
    fflush(stdout);
    return -1;
}

/* One turn on a group's budget (test_shim's waiting tests): touches
 * $TURN_DIR/<TURN_ME>.asking, allocates TURN_MIB MiB (default 60) in one
 * block, prints "got T" (CLOCK_REALTIME ns) and touches <TURN_ME>.got;
 * with TURN_MORE_MIB, once the file TURN_MORE_AFTER exists, touches
 * <TURN_ME>.more and allocates that much more; holds the blocks
 * TURN_HOLD_MS ms (default 500; or, with TURN_UNTIL, until that file
 * exists), prints "freeing T", frees them (to cupool's cache) and stays
 * TURN_LINGER_MS ms more, or, with TURN_LINGER_UNTIL, until that file
 * exists (up to 120 s), then says which ended its stay. Exit 0 if it got
 * every block; 1, with "refused after N ms", if one was refused, or with
 * "PATH never came" if a file it waits for (up to 120 s) did not. */
static int turn(void)
{
    const char *dir = getenv("TURN_DIR"), *me = getenv("TURN_ME"), *until = getenv("TURN_UNTIL");
    int mib = atoi(getenv("TURN_MIB") ? getenv("TURN_MIB") : "60");
    int more = atoi(getenv("TURN_MORE_MIB") ? getenv("TURN_MORE_MIB") : "0");
    int hold_ms = atoi(getenv("TURN_HOLD_MS") ? getenv("TURN_HOLD_MS") : "500");
    int linger_ms = atoi(getenv("TURN_LINGER_MS") ? getenv("TURN_LINGER_MS") : "0");
    char path[512];
    void *p[2] = {NULL, NULL};
    if (turn_take(&p[0], mib, "asking"))
        return 1;
    printf("got %lu\n", (unsigned long)unix_ns());
    fflush(stdout);
    snprintf(path, sizeof(path), "%s/%s.got", dir, me);
    close(open(path, O_WRONLY | O_CREAT, 0600));
    if (more) {
        if (getenv("TURN_MORE_AFTER") && wait_path(getenv("TURN_MORE_AFTER"))) {
            printf("%s never came\n", getenv("TURN_MORE_AFTER"));
            return 1;
        }
        if (turn_take(&p[1], more, "more")) {
            OK(cudaFree(p[0]));
            return 1;
        }
        printf("got more %lu\n", (unsigned long)unix_ns());
        fflush(stdout);
    }
    if (until && wait_path(until)) {
        printf("%s never came\n", until);
        return 1;
    } else if (!until)
        usleep((useconds_t)hold_ms * 1000);
    printf("freeing %lu\n", (unsigned long)unix_ns());
    fflush(stdout);
    for (int i = 0; i < 2; i++)
        if (p[i])
            OK(cudaFree(p[i]));
    if (getenv("TURN_LINGER_UNTIL"))
        printf("%s\n", wait_path(getenv("TURN_LINGER_UNTIL"))
                           ? "stayed 120 s: the file never came"
                           : "stayed until the file came");
    else
        usleep((useconds_t)linger_ms * 1000);
    return 0;
}

/* Races other processes on one group budget: RACE_ITERS times, allocates
 * a block of 1 to 6 MiB (keeping at most 3, freeing the oldest); a refusal
 * is counted, not a failure. Exit 0 once done. */
static int group_race(void)
{
    int iters = atoi(getenv("RACE_ITERS") ? getenv("RACE_ITERS") : "300");
    void *held[3] = {NULL, NULL, NULL};
    unsigned seed = (unsigned)getpid();
    int refused = 0;
    for (int i = 0; i < iters; i++) {
        int k = i % 3;
        if (held[k])
            OK(cudaFree(held[k]));
        held[k] = NULL;
        size_t size = (size_t)(1 + rand_r(&seed) % 6) * MIB;
        if (cudaMalloc(&held[k], size) != cudaSuccess)
            held[k] = NULL, refused++;
        usleep(200); /* the racers overlap the reader's readings */
    }
    for (int k = 0; k < 3; k++)
        if (held[k])
            OK(cudaFree(held[k]));
    printf("refused %d of %d\n", refused, iters);
    return 0;
}

const prog_scenario prog_group_scenarios[] = {
    {"phases", phases},
    {"turn", turn},
    {"group_race", group_race},
    {NULL, NULL},
};
