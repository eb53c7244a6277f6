/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test-job.c - an NCCL job: `cupool job`, the pause and resume of a job, `cupool
 * flush --nccl`.
 */
#include "harness.h"

/* ---- an NCCL job: cupool job ------------------------------------------------- */

/* Starts rank of a 3-rank NCCL job (rt_prog job) with its page in the
 * test's directory, the job's unique id in pages/job-id, and waits until it
 * joined; extra environment strings (up to 3, NULL for none) follow. */
static void job_rank_start(child *c, int rank, const char *e1, const char *e2, const char *e3)
{
    static char direnv[128], readyenv[160], idenv[160], rankenv[32];
    char ready[128];
    snprintf(direnv, sizeof(direnv), "CUPOOL_PAGE_DIR=%s", pages);
    snprintf(ready, sizeof(ready), "%s/ready-rank%d", pages, rank);
    snprintf(readyenv, sizeof(readyenv), "READY=%s", ready);
    snprintf(idenv, sizeof(idenv), "JOB_ID=%s/job-id", pages);
    snprintf(rankenv, sizeof(rankenv), "JOB_RANK=%d", rank);
    spawn(c, "job", direnv, readyenv, idenv, rankenv, "JOB_NRANKS=3", e1, e2, e3, NULL);
    wait_for_file(ready);
}

/* Ranks 0 and 1 of the job; the third never starts. With split, each also
 * splits the job with color 5 into a communicator of 2 ranks. */
static void job_start(child c[2], bool split, const char *e0)
{
    const char *sp = split ? "JOB_SPLIT=5" : NULL, *sn = split ? "SIMNCCL_SPLIT_NRANKS=2" : NULL;
    job_rank_start(&c[0], 0, sp, sn, e0);
    job_rank_start(&c[1], 1, sp, sn, NULL);
    /* Their communicators on their pages (published by the helper, which
     * a loaded machine may not have run yet: cupool job does not ask). */
    for (int i = 0; i < 2; i++)
        assert_int_equal(wait_page(c[i].pid, split ? "d[\"process\"][\"nccl_comms\"] == 2"
                                                   : "d[\"process\"][\"nccl_comms\"] == 1"), 0);
}

static void job_end(child c[2])
{
    for (int i = 0; i < 2; i++) {
        kill(c[i].pid, SIGTERM);
        assert_int_equal(finish(&c[i], "job", 0)->status, 0);
    }
}

/* cupool job PID's output (text, or --json with json) into out; its exit
 * status. */
static int job_cli(int pid, bool json, char *out, size_t len)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "CUPOOL_PAGE_DIR=%s " READER " job %s%d 2>&1", pages,
             json ? "--json " : "", pid);
    return shell(cmd, out, len);
}

/* Whether out has a row of the table for pid's rank (pid, comm, rank,
 * device 0). */
static bool job_row(const char *out, int pid, int rank)
{
    char row[96];
    snprintf(row, sizeof(row), "  %7d %-16s %4d %6d\n", pid, "rt_prog", rank, 0);
    return strstr(out, row) != NULL;
}

/* Two ranks of a 3-rank job on this node: cupool job of either names the
 * other with its rank, and says the third is elsewhere; --json the same. */
static void test_nccl_job_names_the_other_rank(void **s)
{
    (void)s;
    child c[2];
    job_start(c, false, NULL);
    static char out[16384];
    for (int i = 0; i < 2; i++) {
        assert_int_equal(job_cli(c[i].pid, false, out, sizeof(out)), 0);
        if (!job_row(out, c[1 - i].pid, 1 - i) || !strstr(out, "1 NCCL communicator\n") ||
            !strstr(out, "1 of 3 ranks on other nodes") || !strstr(out, " of 3, device 0"))
            fail_msg("cupool job %d said:\n%s", c[i].pid, out);
    }
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "CUPOOL_PAGE_DIR=%s " READER " job --json %d | python3 -c '"
             "import json,sys; d=json.loads(sys.stdin.read()); c=d[\"communicators\"]; "
             "assert d[\"nccl_comms\"]==1 and len(c)==1, d; c=c[0]; "
             "assert c[\"nranks\"]==3 and c[\"ranks\"]==[{\"rank\":0,\"device\":0,"
             "\"operations\":0,\"suspended\":False}], c; "
             "assert d[\"gate\"]==dict(closed=False,waiting=0,can_suspend=True), d; "
             "assert c[\"peers\"]==[{\"pid\":%d,\"comm\":\"rt_prog\",\"rank\":1,\"device\":0}], c; "
             "assert c[\"ranks_elsewhere\"]==1, c; print(\"ok\")'", pages, c[0].pid, c[1].pid);
    assert_int_equal(shell(cmd, out, sizeof(out)), 0);
    assert_string_equal(out, "ok\n");
    job_end(c);
}

/* A split's child: one id in both ranks (its parent's id and color), its
 * own size; cupool job lists it beside the parent. */
static void test_nccl_job_split(void **s)
{
    (void)s;
    child c[2];
    job_start(c, true, NULL);
    static char out[16384];
    assert_int_equal(job_cli(c[1].pid, false, out, sizeof(out)), 0);
    if (!strstr(out, "2 NCCL communicators\n") || !strstr(out, "rank 1 of 2, device 0") ||
        !strstr(out, "all 2 ranks on this node") || !strstr(out, "1 of 3 ranks on other nodes"))
        fail_msg("cupool job said:\n%s", out);
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "CUPOOL_PAGE_DIR=%s " READER " job --json %d | python3 -c '"
             "import json,sys; d=json.loads(sys.stdin.read()); c=d[\"communicators\"]; "
             "assert sorted(x[\"nranks\"] for x in c)==[2,3], c; "
             "assert all([p[\"pid\"] for p in x[\"peers\"]]==[%d] for x in c), c; "
             "assert len(set(x[\"id\"] for x in c))==2, c; print(\"ok\")'", pages, c[0].pid,
             c[1].pid);
    assert_int_equal(shell(cmd, out, sizeof(out)), 0);
    assert_string_equal(out, "ok\n");
    job_end(c);
}

/* A communicator destroyed leaves the page (and the other rank's cupool job
 * sees its partner gone); a process with none is told apart. */
static void test_nccl_job_destroy(void **s)
{
    (void)s;
    child c[2];
    char destroy[160], done[192];
    snprintf(destroy, sizeof(destroy), "JOB_DESTROY=%s/destroy", pages);
    job_start(c, true, destroy);
    static char out[16384];
    snprintf(done, sizeof(done), "%s/destroy", pages);
    FILE *f = fopen(done, "w");
    assert_non_null(f);
    fclose(f);
    snprintf(done, sizeof(done), "%s/destroy.done", pages);
    wait_for_file(done);
    assert_int_equal(wait_page(c[0].pid, "d[\"process\"][\"nccl_comms\"] == 1"), 0);
    assert_int_equal(job_cli(c[0].pid, false, out, sizeof(out)), 0);
    if (!strstr(out, "1 NCCL communicator\n") || strstr(out, " of 2,"))
        fail_msg("cupool job of the rank that destroyed the split said:\n%s", out);
    assert_int_equal(job_cli(c[1].pid, false, out, sizeof(out)), 0);
    if (!strstr(out, "rank 1 of 2, device 0; 0 operations issued here\n  no other process on "
                "this node holds a rank of it\n  1 of 2 ranks on other nodes"))
        fail_msg("cupool job of the other rank said:\n%s", out);
    job_end(c);
    child plain;
    serve_start(&plain, "plain", NULL, NULL);
    assert_int_equal(job_cli(plain.pid, false, out, sizeof(out)), 1);
    assert_non_null(strstr(out, "holds no NCCL communicator"));
    kill(plain.pid, SIGTERM);
    assert_int_equal(finish(&plain, "serve", 0)->status, 0);
}

/* cupool stat --json: the communicators alive, and per device what NCCL
 * holds and could suspend, where NCCL tells (ncclCommMemStats: rank 0
 * only), else null. */
static void test_nccl_stat_fields(void **s)
{
    (void)s;
    child c[2];
    job_start(c, true, "SIMNCCL_MEMSTATS=1");
    static const char *const cond[] = {
        "d[\"process\"][\"nccl_comms\"] == 2 and d[\"devices\"][0][\"nccl_held\"] == 2 * 2**20"
        " and d[\"devices\"][0][\"nccl_suspendable\"] == 3 * 2**19",
        "d[\"process\"][\"nccl_comms\"] == 2 and d[\"devices\"][0][\"nccl_held\"] is None"
        " and d[\"devices\"][0][\"nccl_suspendable\"] is None",
    };
    for (int i = 0; i < 2; i++)
        if (wait_page(c[i].pid, cond[i]))
            fail_msg("rank %d's page never had: %s", i, cond[i]);
    job_end(c);
}

/* ---- cupool pause of an NCCL job, cupool flush --nccl ------------------------- */

/* Starts both ranks of a 2-rank job (rt_prog job) that all-reduce every
 * every[rank] ticks of 10 ms, counting into pages/count-RANK; e0, e1: one
 * more environment string for each rank, or NULL. */
static void duo_start_with(child c[2], const int every[2], const char *both, const char *e0,
                           const char *e1)
{
    static char direnv[128], readyenv[2][160], idenv[160], rankenv[2][32], everyenv[2][32],
        countenv[2][160], simdir[160];
    snprintf(direnv, sizeof(direnv), "CUPOOL_PAGE_DIR=%s", pages);
    snprintf(idenv, sizeof(idenv), "JOB_ID=%s/duo-id", pages);
    snprintf(simdir, sizeof(simdir), "SIMNCCL_DIR=%s", pages);
    char cmd[384], out[64];
    snprintf(cmd, sizeof(cmd), "rm -f %s/duo-id %s/count-* %s/ready-duo*", pages, pages, pages);
    shell(cmd, out, sizeof(out));
    for (int r = 0; r < 2; r++) {
        snprintf(readyenv[r], sizeof(readyenv[r]), "READY=%s/ready-duo%d", pages, r);
        snprintf(rankenv[r], sizeof(rankenv[r]), "JOB_RANK=%d", r);
        snprintf(everyenv[r], sizeof(everyenv[r]), "JOB_EVERY=%d", every[r]);
        snprintf(countenv[r], sizeof(countenv[r]), "JOB_COUNT=%s/count-%d", pages, r);
        const char *own = r ? e1 : e0;
        spawn(&c[r], "job", direnv, readyenv[r], idenv, rankenv[r], "JOB_NRANKS=2",
              everyenv[r], countenv[r], simdir, "SIMNCCL_MEMSTATS=1", both ? both : own,
              both ? own : NULL, NULL);
    }
    for (int r = 0; r < 2; r++)
        wait_for_file(readyenv[r] + strlen("READY="));
}

static void duo_start(child c[2], const int every[2], const char *e0, const char *e1)
{
    duo_start_with(c, every, NULL, e0, e1);
}

/* The all-reduces rank has issued, as it counted them. */
static long duo_count(int rank)
{
    char path[160], buf[32];
    snprintf(path, sizeof(path), "%s/count-%d", pages, rank);
    slurp(path, buf, sizeof(buf));
    return atol(buf);
}

/* Whether rank goes on issuing all-reduces: one more within 60 s (a
 * loaded machine may run them seconds apart). */
static bool duo_goes_on(int rank)
{
    long n = duo_count(rank);
    for (int i = 0; i < 6000 && duo_count(rank) <= n; i++)
        usleep(10000);
    return duo_count(rank) > n;
}

/* Whether both ranks go on issuing all-reduces. */
static bool duo_runs(void)
{
    return duo_goes_on(0) && duo_goes_on(1);
}

/* Whether each rank's communicators (n each) were resumed by cupool's
 * RESUME, not at the rank's next call: none suspended (NCCL says each holds
 * its 1 MiB again), no resume at a call counted. */
static void duo_resumed_explicitly(const child c[2], int n)
{
    char cond[160];
    snprintf(cond, sizeof(cond), "d[\"process\"][\"nccl_lazy_resumes\"] == 0 and "
             "d[\"devices\"][0][\"nccl_held\"] == %d * 2**20", n);
    for (int r = 0; r < 2; r++)
        if (c[r].pid > 0 && wait_page(c[r].pid, cond))
            fail_msg("process %d after the resume: not %s", c[r].pid, cond);
}

/* A two-rank job, one rank three times slower: cupool pause of either
 * rank stops both at the same all-reduce (given 120 s to, where it takes
 * well under a second on an idle machine), suspends their communicators
 * (NCCL gives back 768 KiB each), checkpoints both; a collective issued
 * meanwhile waits at the gate until cupool resume. A checkpoint failing on
 * the second rank brings the first back, named, and the job runs on. */
static void test_nccl_job_pause_and_resume(void **s)
{
    (void)s;
    child c[2];
    duo_start(c, (const int[]){1, 3}, NULL, NULL);
    char args[64], out[4096], calls[1024];
    usleep(100000);
    snprintf(args, sizeof(args), "pause --timeout 120 %d", c[0].pid);
    int st = pause_run(args, NULL, out, sizeof(out), calls, sizeof(calls));
    print_message("%s%s\n", out, calls);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "paused the NCCL job"));
    assert_non_null(strstr(out, "NCCL gave back 1.50 MiB"));
    assert_int_equal(pause_state(c[0].pid), 2);
    assert_int_equal(pause_state(c[1].pid), 2);
    long n0 = duo_count(0), n1 = duo_count(1);
    if (n0 != n1) /* the slower rank caught up to the same all-reduce */
        fail_msg("paused at all-reduces %ld and %ld", n0, n1);
    usleep(300000); /* the next all-reduce waits at the gate */
    assert_int_equal(duo_count(0), n0);
    /* cupool job shows it: the gate closed, a call waiting, the
     * communicator suspended, the operations issued. */
    static char job[8192];
    char ops[64];
    snprintf(ops, sizeof(ops), "; %ld operations issued here; suspended by cupool", n0);
    for (int i = 0; i < 600; i++) { /* the waiting call on the page: polled, up to 60 s */
        assert_int_equal(job_cli(c[0].pid, false, job, sizeof(job)), 0);
        if (strstr(job, "its NCCL gate is closed by cupool, 1 call waiting") && strstr(job, ops))
            break;
        usleep(100000);
    }
    if (!strstr(job, "its NCCL gate is closed by cupool, 1 call waiting") || !strstr(job, ops))
        fail_msg("cupool job of a paused rank said (60 s after its pause):\n%s", job);
    /* A paused job is not flushed; a second controller of the job (here
     * one holding its lock: a rank's page, flock'd) is refused. */
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "CUPOOL_PAGE_DIR=%s " READER " flush --nccl %d 2>&1", pages,
             c[0].pid);
    assert_int_equal(shell(cmd, out, sizeof(out)), 1);
    assert_non_null(strstr(out, "is paused (cupool pause): cupool resume it first"));
    snprintf(cmd, sizeof(cmd), "flock -n %s/cupool-%d/$(stat -L -c %%i /proc/self/ns/pid)-%d "
             "-c 'CUPOOL_PAGE_DIR=%s " READER " flush --nccl %d' 2>&1", pages, (int)getuid(),
             c[1].pid, pages, c[0].pid);
    assert_int_equal(shell(cmd, out, sizeof(out)), 1);
    if (!strstr(out, "another cupool pause, resume or flush --nccl of this job is under way"))
        fail_msg("a second controller: %s", out);
    snprintf(args, sizeof(args), "resume %d", c[1].pid);
    st = pause_run(args, NULL, out, sizeof(out), calls, sizeof(calls));
    print_message("%s\n", out);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "communicators resumed"));
    assert_int_equal(pause_state(c[0].pid), 0);
    assert_true(duo_runs());
    duo_resumed_explicitly(c, 1);
    /* The second rank's checkpoint fails: the first is restored. */
    char fail[64], names[96];
    snprintf(fail, sizeof(fail), "checkpoint@%d", c[1].pid);
    snprintf(args, sizeof(args), "pause --timeout 120 %d", c[0].pid);
    st = pause_run(args, fail, out, sizeof(out), calls, sizeof(calls));
    print_message("%s%s\n", out, calls);
    assert_int_equal(st, 1);
    snprintf(names, sizeof(names), "process %d (a rank of it) could not be checkpointed",
             c[1].pid);
    assert_non_null(strstr(out, names));
    snprintf(names, sizeof(names), "process %d restored and unlocked, process %d left running",
             c[0].pid, c[1].pid);
    assert_non_null(strstr(out, names));
    assert_non_null(strstr(out, "the communicators resumed and the gates open"));
    assert_null(strstr(out, "not paused, nothing to do"));
    assert_int_equal(pause_state(c[0].pid), 0);
    assert_int_equal(pause_state(c[1].pid), 0);
    assert_true(duo_runs());
    duo_resumed_explicitly(c, 1);
    job_end(c);
}

/* A two-rank job whose ranks hold 8 MiB each in VMM segments
 * (CUPOOL_VMM=1): once their communicators are suspended, cupool pause
 * moves each rank's memory itself (not the driver's checkpoint alone), and
 * cupool resume brings it back. Each rank reads a byte of its memory back
 * at every all-reduce and all of it at the end: a read let through while
 * the memory was away faults on the simulated device, lost bytes fail it. */
static void test_nccl_job_pause_moves_ranks(void **s)
{
    (void)s;
    child c[2];
    static char cupti[PATH_MAX + 32];
    snprintf(cupti, sizeof(cupti), "%s", sim_cupti());
    /* The ranks mark where the driver's state lives that CUPTI watches
     * them: the simulated driver then refuses their lock, as the real one
     * does, and cupool's move alone holds them (the resume must bring
     * their memory back all the same). */
    char ckpt[160], cmd[200], o[64];
    snprintf(ckpt, sizeof(ckpt), "%s/ckpt", pages);
    snprintf(cmd, sizeof(cmd), "mkdir -p %s", ckpt);
    shell(cmd, o, sizeof(o));
    setenv("JOB_BUF", "8", 1);
    setenv("SIMCUDA_CKPT_DIR", ckpt, 1);
    duo_start_with(c, (const int[]){1, 2}, "CUPOOL_VMM=1", cupti, cupti);
    unsetenv("JOB_BUF");
    unsetenv("SIMCUDA_CKPT_DIR");
    char args[64], out[4096], calls[1024], want[96];
    snprintf(args, sizeof(args), "pause --timeout 120 %d", c[1].pid);
    int st = pause_run(args, NULL, out, sizeof(out), calls, sizeof(calls));
    print_message("%s%s\n", out, calls);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "paused the NCCL job"));
    for (int r = 0; r < 2; r++) {
        snprintf(want, sizeof(want), "moved %d's memory to host memory: 0.01 GiB", c[r].pid);
        if (!strstr(out, want))
            fail_msg("rank %d's memory was not moved by cupool:\n%s", r, out);
        snprintf(want, sizeof(want), "paused %d: cupool moved 10.00 MiB to host memory and "
                 "holds its CUDA calls", c[r].pid);
        if (!strstr(out, want))
            fail_msg("rank %d was not held by cupool's move alone:\n%s", r, out);
    }
    long n0 = duo_count(0);
    usleep(300000); /* the next all-reduce, and its read, wait at the gates */
    assert_int_equal(duo_count(0), n0);
    snprintf(args, sizeof(args), "resume %d", c[0].pid);
    st = pause_run(args, NULL, out, sizeof(out), calls, sizeof(calls));
    print_message("%s\n", out);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "communicators resumed"));
    for (int r = 0; r < 2; r++) {
        snprintf(want, sizeof(want), "brought back %d's memory to the device", c[r].pid);
        if (!strstr(out, want))
            fail_msg("rank %d's memory was not brought back:\n%s", r, out);
    }
    assert_true(duo_runs());
    for (int r = 0; r < 2; r++) {
        kill(c[r].pid, SIGTERM);
        result *e = finish(&c[r], "job", 0);
        if (e->status || !strstr(e->out, "job data ok"))
            fail_msg("rank %d ended (%d) without its data: %s", r, e->status, e->out);
    }
}

/* A suspend refused on one rank rolls the job back; an NCCL without
 * ncclCommSuspend is refused with nothing done; cupool flush --nccl
 * suspends the idle communicators and the next all-reduce resumes them. */
/* A two-rank job started with env in both ranks: cupool pause refuses it
 * before anything is done (no driver lock), saying says; it runs on. */
static void duo_refused(const char *env, const char *says)
{
    child c[2];
    char args[64], out[4096], calls[1024];
    duo_start(c, (const int[]){2, 2}, env, env);
    snprintf(args, sizeof(args), "pause --timeout 120 %d", c[0].pid);
    int st = pause_run(args, NULL, out, sizeof(out), calls, sizeof(calls));
    print_message("%s%s\n", out, calls);
    assert_int_equal(st, 1);
    assert_non_null(strstr(out, says));
    assert_null(strstr(calls, "lock"));
    assert_true(duo_runs());
    job_end(c);
}

static void test_nccl_job_suspend_refusals_and_flush(void **s)
{
    (void)s;
    child c[2];
    char args[64], out[4096], calls[1024], cmd[512], names[96];
    duo_start(c, (const int[]){2, 2}, NULL, "SIMNCCL_SUSPEND_FAIL=1");
    snprintf(args, sizeof(args), "pause --timeout 120 %d", c[0].pid);
    int st = pause_run(args, NULL, out, sizeof(out), calls, sizeof(calls));
    print_message("%s%s\n", out, calls);
    assert_int_equal(st, 1);
    snprintf(names, sizeof(names), "process %d could not suspend", c[1].pid);
    assert_non_null(strstr(out, names));
    assert_null(strstr(calls, "lock"));
    assert_true(duo_runs());
    duo_resumed_explicitly(c, 1);
    job_end(c);
    /* Two communicators a rank (a split), rank 2 refusing its second
     * suspend: its first stays suspended for the controller, which
     * resumes both ranks together (a rank resuming on its own waited for
     * the other until NCCL's timeout, 300 s here, which the test's 60 s
     * bound on the pause catches, however slow the machine). */
    setenv("SIMNCCL_RESUME_TIMEOUT", "300", 1); /* the ranks inherit it */
    duo_start_with(c, (const int[]){2, 2}, "JOB_SPLIT=5", NULL, "SIMNCCL_SUSPEND_FAIL=after1");
    unsetenv("SIMNCCL_RESUME_TIMEOUT");
    snprintf(args, sizeof(args), "pause --timeout 120 %d", c[0].pid);
    double t0 = now_s();
    st = pause_run(args, NULL, out, sizeof(out), calls, sizeof(calls));
    double took = now_s() - t0;
    print_message("%s%s(%.2f s)\n", out, calls, took);
    assert_int_equal(st, 1);
    snprintf(names, sizeof(names), "process %d could not suspend", c[1].pid);
    assert_non_null(strstr(out, names));
    assert_null(strstr(calls, "lock"));
    assert_true(took < 60);
    assert_true(duo_runs());
    job_end(c);
    /* 17 communicators a rank: its page lists 16, the gate could set no
     * target for the 17th. */
    duo_refused("JOB_SPLITS=16", "holds 17 NCCL communicators, of which its page lists 16");
    duo_refused("SIMNCCL_LIB=libnccl-nosuspend.so", "has no ncclCommSuspend");
    duo_start(c, (const int[]){5, 5}, NULL, NULL);
    snprintf(cmd, sizeof(cmd), "CUPOOL_PAGE_DIR=%s " READER " flush --nccl %d 2>&1", pages,
             c[1].pid);
    st = shell(cmd, out, sizeof(out));
    print_message("%s\n", out);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "NCCL gave back 1.50 MiB"));
    assert_true(duo_runs()); /* each all-reduce resumed its communicator first */
    assert_int_equal(wait_page(c[0].pid, "d[\"process\"][\"nccl_lazy_resumes\"] == 1"), 0);
    job_end(c);
}

/* One process holding both ranks of a 2-rank job, one thread driving them
 * in a group: cupool resume resumes the two together (one waiting for the
 * other, which the same thread resumed next, deadlocked until NCCL's
 * timeout); after cupool flush --nccl, the next group's start resumes
 * both before the group. */
static void test_nccl_job_two_ranks_in_one_process(void **s)
{
    (void)s;
    child c[2];
    static char direnv[128], readyenv[160], idenv[160], countenv[160], simdir[160];
    snprintf(direnv, sizeof(direnv), "CUPOOL_PAGE_DIR=%s", pages);
    snprintf(readyenv, sizeof(readyenv), "READY=%s/ready-duo0", pages);
    snprintf(idenv, sizeof(idenv), "JOB_ID=%s/duo-id", pages);
    snprintf(countenv, sizeof(countenv), "JOB_COUNT=%s/count-0", pages);
    snprintf(simdir, sizeof(simdir), "SIMNCCL_DIR=%s", pages);
    spawn(&c[0], "job", direnv, readyenv, idenv, "JOB_RANK=0", "JOB_NRANKS=2", "JOB_LOCAL=2",
          "JOB_EVERY=2", countenv, simdir, "SIMNCCL_MEMSTATS=1", "SIMNCCL_RESUME_TIMEOUT=2",
          NULL);
    c[1].pid = 0;
    wait_for_file(readyenv + strlen("READY="));
    char args[64], out[4096], calls[1024], cmd[512];
    snprintf(args, sizeof(args), "pause --timeout 120 %d", c[0].pid);
    int st = pause_run(args, NULL, out, sizeof(out), calls, sizeof(calls));
    print_message("%s%s\n", out, calls);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "NCCL gave back 1.50 MiB"));
    snprintf(args, sizeof(args), "resume %d", c[0].pid);
    st = pause_run(args, NULL, out, sizeof(out), calls, sizeof(calls));
    print_message("%s\n", out);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "communicators resumed"));
    assert_true(duo_goes_on(0));
    duo_resumed_explicitly(c, 2);
    snprintf(cmd, sizeof(cmd), "CUPOOL_PAGE_DIR=%s " READER " flush --nccl %d 2>&1", pages,
             c[0].pid);
    st = shell(cmd, out, sizeof(out));
    print_message("%s\n", out);
    assert_int_equal(st, 0);
    assert_true(duo_goes_on(0));
    assert_int_equal(wait_page(c[0].pid, "d[\"process\"][\"nccl_lazy_resumes\"] == 2 and "
                               "d[\"devices\"][0][\"nccl_held\"] == 2 * 2**20"), 0);
    kill(c[0].pid, SIGTERM);
    assert_int_equal(finish(&c[0], "job", 0)->status, 0);
}

const struct CMUnitTest shim_job_tests[] = {
    cmocka_unit_test_setup_teardown(test_nccl_job_names_the_other_rank, pages_setup,
                                    pages_teardown),
    cmocka_unit_test_setup_teardown(test_nccl_job_split, pages_setup, pages_teardown),
    cmocka_unit_test_setup_teardown(test_nccl_job_destroy, pages_setup, pages_teardown),
    cmocka_unit_test_setup_teardown(test_nccl_stat_fields, pages_setup, pages_teardown),
    cmocka_unit_test_setup_teardown(test_nccl_job_pause_and_resume, pages_setup,
                                    pages_teardown),
    cmocka_unit_test_setup_teardown(test_nccl_job_pause_moves_ranks, pages_setup,
                                    pages_teardown),
    cmocka_unit_test_setup_teardown(test_nccl_job_suspend_refusals_and_flush, pages_setup,
                                    pages_teardown),
    cmocka_unit_test_setup_teardown(test_nccl_job_two_ranks_in_one_process, pages_setup,
                                    pages_teardown),
};
const size_t shim_job_count = sizeof(shim_job_tests) / sizeof(shim_job_tests[0]);
