/* SPDX-License-Identifier: Apache-2.0 */
/*
 * job.c - an NCCL job: ranks in separate processes (cupool job, pause).
 */
#include "prog.h"

#ifdef SIMCUDA
/* ---- an NCCL job: ranks in separate processes ---- */

typedef struct { char internal[128]; } nccl_id;

/* The job's unique id: made by rank 0 and written to path (whole, by a
 * rename), read by the other ranks (waiting up to 60 s for it). */
static nccl_id job_unique_id(const char *path, int rank)
{
    nccl_id id;
    if (rank == 0) {
        char tmp[4096];
        snprintf(tmp, sizeof(tmp), "%s.tmp", path);
        CHECK(((int (*)(nccl_id *))nccl("ncclGetUniqueId"))(&id) == 0);
        FILE *f = fopen(tmp, "w");
        CHECK(f && fwrite(&id, sizeof(id), 1, f) == 1 && fclose(f) == 0);
        CHECK(rename(tmp, path) == 0);
        return id;
    }
    FILE *f = NULL;
    for (int i = 0; i < 6000 && !(f = fopen(path, "r")); i++)
        sleep_ms(10);
    CHECK(f && fread(&id, sizeof(id), 1, f) == 1);
    fclose(f);
    return id;
}

static void touch(const char *path)
{
    FILE *f = path ? fopen(path, "w") : NULL;
    if (f)
        fclose(f);
}

/* One all-reduce on each of the n communicators of comm (in a group when
 * more than one: one thread drives them); its count written to the file
 * JOB_COUNT (by a rename). */
static void job_step(void *const *comm, int n, unsigned long *ops)
{
    nccl_allreduce_fn allreduce = (nccl_allreduce_fn)nccl("ncclAllReduce");
    int (*group_start)(void) = (int (*)(void))nccl("ncclGroupStart");
    int (*group_end)(void) = (int (*)(void))nccl("ncclGroupEnd");
    CHECK(n == 1 || group_start() == 0);
    for (int i = 0; i < n; i++)
        CHECK(allreduce(NULL, NULL, 0, 7, 0, comm[i], NULL) == 0);
    CHECK(n == 1 || group_end() == 0);
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s.tmp", getenv("JOB_COUNT"));
    FILE *f = fopen(tmp, "w");
    CHECK(f && fprintf(f, "%lu\n", ++*ops) > 0 && fclose(f) == 0);
    CHECK(rename(tmp, getenv("JOB_COUNT")) == 0); /* whole, for the reader */
}

/* Joins an NCCL job as rank JOB_RANK of JOB_NRANKS, its unique id in the
 * file JOB_ID (rank 0 makes it); with JOB_LOCAL=2, as ranks JOB_RANK and
 * JOB_RANK + 1 both (two GPUs' ranks in one process). With JOB_SPLIT=COLOR,
 * splits it (key: its rank); with JOB_SPLITS=N, N more splits (colors 100
 * on), kept to the end. Touches $READY, then waits up to 120 s (`job
 * SECONDS`: that long) for
 * SIGTERM; once the file JOB_DESTROY names appears, destroys the split's
 * child (else the job's communicator) and touches JOB_DESTROY.done. With
 * JOB_EVERY=N, an all-reduce on each of the job's communicators every N
 * ticks of 10 ms (job_step). With JOB_BUF=MIB, it holds that much device
 * memory filled with its rank's byte, writes a byte of it again at every
 * step (a memset: on the simulated device, one let through while the
 * memory is away faults) and reads all of it at the end (lost bytes fail
 * the rank). Aborts what is left at the end. */
static int nccl_job(void)
{
    struct sigaction sa = {.sa_handler = on_term};
    sigaction(SIGTERM, &sa, NULL);
    const char *idpath = getenv("JOB_ID"), *split = getenv("JOB_SPLIT");
    const char *destroy = getenv("JOB_DESTROY");
    CHECK(idpath && getenv("JOB_RANK") && getenv("JOB_NRANKS"));
    int rank = atoi(getenv("JOB_RANK")), nranks = atoi(getenv("JOB_NRANKS"));
    int local = getenv("JOB_LOCAL") ? atoi(getenv("JOB_LOCAL")) : 1;
    CHECK(local == 1 || local == 2);
    nccl_id id = job_unique_id(idpath, rank);
    void *comm[2] = {NULL, NULL}, *child = NULL;
    for (int i = 0; i < local; i++)
        CHECK(((int (*)(void **, int, nccl_id, int))nccl("ncclCommInitRank"))(
                  &comm[i], nranks, id, rank + i) == 0);
    int (*split_fn)(void *, int, int, void **, void *) =
        (int (*)(void *, int, int, void **, void *))nccl("ncclCommSplit");
    if (split)
        CHECK(split_fn(comm[0], atoi(split), rank, &child, NULL) == 0 && child);
    void *more[32] = {NULL};
    int nmore = getenv("JOB_SPLITS") ? atoi(getenv("JOB_SPLITS")) : 0;
    CHECK(nmore >= 0 && nmore <= 32);
    for (int i = 0; i < nmore; i++)
        CHECK(split_fn(comm[0], 100 + i, rank, &more[i], NULL) == 0 && more[i]);
    size_t buf_len = getenv("JOB_BUF") ? (size_t)atoi(getenv("JOB_BUF")) << 20 : 0;
    unsigned char *buf = NULL, want = (unsigned char)(0x40 + rank);
    if (buf_len) {
        OK(cudaMalloc((void **)&buf, buf_len));
        OK(cudaMemsetAsync(buf, want, buf_len, 0));
        OK(cudaDeviceSynchronize());
    }
    touch(getenv("READY"));
    int (*destroy_fn)(void *) = (int (*)(void *))nccl("ncclCommDestroy");
    int every = getenv("JOB_EVERY") ? atoi(getenv("JOB_EVERY")) : 0;
    unsigned long ops = 0;
    for (int i = 0, n = hold_ticks(120); i < n && !stop; i++) {
        if (every > 0 && i % every == 0) {
            job_step(comm, local, &ops);
            if (buf) {
                OK(cudaMemsetAsync(buf + ops % buf_len, want, 1, 0));
                OK(cudaDeviceSynchronize());
            }
        }
        if (destroy && access(destroy, F_OK) == 0) {
            CHECK(destroy_fn(child ? child : comm[0]) == 0);
            *(child ? &child : &comm[0]) = NULL;
            char done[4096];
            snprintf(done, sizeof(done), "%s.done", destroy);
            touch(done);
            destroy = NULL;
        }
        sleep_ms(10);
    }
    if (buf) {
        for (size_t k = 0; k < buf_len; k++) /* the simulated device's is host memory */
            CHECK(buf[k] == want);
        OK(cudaFree(buf));
        printf("job data ok\n");
    }
    int (*abort_fn)(void *) = (int (*)(void *))nccl("ncclCommAbort");
    for (int i = 0; i < nmore; i++)
        CHECK(abort_fn(more[i]) == 0);
    CHECK(abort_fn(child) == 0 && abort_fn(comm[0]) == 0 && abort_fn(comm[1]) == 0);
    return 0;
}
#endif /* SIMCUDA */

const prog_scenario prog_job_scenarios[] = {
#ifdef SIMCUDA
    {"job", nccl_job},
#endif
    {NULL, NULL},
};
