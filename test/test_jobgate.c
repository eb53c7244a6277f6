/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_jobgate.c - which processes the NCCL job controller takes for a
 * job (jobgate_select), over a node view made here: the job is taken whole
 * or refused; another user's process claiming a communicator is left out
 * and named; ranks missing, claimed twice or out of range refuse it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "jobgate.h"

enum { ME = 1000, OTHER = 2000, COMM = 0x5eed, SPLIT = 0x5917 };

static node_proc procs[8];
static node_scan scan;
static jobgate g;

/* A process of uid on the node view, holding rank of COMM's nranks. */
static node_proc *proc_add(int pid, uint32_t uid, int32_t rank, int32_t nranks)
{
    node_proc *p = &procs[scan.nprocs++];
    memset(p, 0, sizeof(*p));
    p->pid = p->view.pid = pid;
    p->uid = uid;
    p->view.ncomms = 1;
    p->view.proc.nccl_comms = 1;
    p->view.comms[0] = (stats_comm){.id = COMM, .rank = rank, .nranks = nranks};
    return p;
}

/* Adds a communicator entry (id, rank of nranks) to p. */
static void comm_add(node_proc *p, uint64_t id, int32_t rank, int32_t nranks)
{
    p->view.comms[p->view.ncomms++] = (stats_comm){.id = id, .rank = rank, .nranks = nranks};
    p->view.proc.nccl_comms++;
}

static int view_setup(void **s)
{
    (void)s;
    memset(&scan, 0, sizeof(scan));
    memset(&g, 0, sizeof(g));
    scan.procs = procs;
    return 0;
}

/* Selects the job of procs[0] as user ME: jobgate_select's answer. */
static int select_job(void)
{
    return jobgate_select(&g, &procs[0].view, ME, &scan);
}

static bool in_job(int pid)
{
    for (size_t i = 0; i < g.n; i++)
        if (g.pid[i] == pid)
            return true;
    return false;
}

/* Every rank here, of one user: the job is both. */
static void test_jobgate_whole_job(void **s)
{
    (void)s;
    proc_add(10, ME, 0, 2);
    proc_add(11, ME, 1, 2);
    proc_add(12, ME, 0, 1)->view.comms[0].id = 0x0dd; /* another job */
    assert_int_equal(select_job(), 0);
    assert_int_equal(g.n, 2);
    assert_true(in_job(10) && in_job(11));
    assert_int_equal(g.nignored, 0);
}

/* A rank not running (or on another node, or hidden): refused. */
static void test_jobgate_missing_rank(void **s)
{
    (void)s;
    proc_add(10, ME, 0, 3);
    proc_add(11, ME, 1, 3);
    assert_int_equal(select_job(), 1);
}

/* Another user's process claims the communicator: left out and named,
 * whether it claims a rank that is there (the job is whole without it) or
 * the one that is missing (refused: it is not counted). */
static void test_jobgate_foreign_rank(void **s)
{
    (void)s;
    proc_add(10, ME, 0, 2);
    proc_add(11, ME, 1, 2);
    proc_add(12, OTHER, 1, 2);
    assert_int_equal(select_job(), 0);
    assert_int_equal(g.n, 2);
    assert_false(in_job(12));
    assert_int_equal(g.nignored, 1);
    assert_int_equal(g.ignored[0], 12);
    view_setup(NULL);
    proc_add(10, ME, 0, 2);
    proc_add(12, OTHER, 1, 2);
    assert_int_equal(select_job(), 1);
    assert_int_equal(g.nignored, 1);
    assert_int_equal(g.ignored[0], 12);
}

/* More processes claim ranks than the communicator has, a rank twice, a
 * rank out of its size, pages disagreeing on its size: refused. */
static void test_jobgate_extra_ranks(void **s)
{
    (void)s;
    proc_add(10, ME, 0, 2);
    proc_add(11, ME, 1, 2);
    proc_add(12, ME, 1, 2);
    assert_int_equal(select_job(), 1);
    view_setup(NULL);
    proc_add(10, ME, 0, 2);
    proc_add(11, ME, 0, 2);
    assert_int_equal(select_job(), 1);
    view_setup(NULL);
    proc_add(10, ME, 0, 2);
    proc_add(11, ME, 2, 2);
    assert_int_equal(select_job(), 1);
    view_setup(NULL);
    proc_add(10, ME, 0, 2);
    proc_add(11, ME, 1, 3);
    assert_int_equal(select_job(), 1);
}

/* The communicators of the job's other ranks are the job's too (a split
 * the named process is not in): each must be whole. */
static void test_jobgate_communicators_of_other_ranks(void **s)
{
    (void)s;
    proc_add(10, ME, 0, 2);
    comm_add(proc_add(11, ME, 1, 2), SPLIT, 0, 2);
    assert_int_equal(select_job(), 1); /* the split's rank 1 is nowhere */
    view_setup(NULL);
    proc_add(10, ME, 0, 2);
    comm_add(proc_add(11, ME, 1, 2), SPLIT, 0, 2);
    proc_add(12, ME, 0, 1)->view.comms[0] = (stats_comm){.id = SPLIT, .rank = 1, .nranks = 2};
    assert_int_equal(select_job(), 0);
    assert_int_equal(g.n, 3);
    assert_int_equal(g.nids, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_jobgate_whole_job, view_setup),
        cmocka_unit_test_setup(test_jobgate_missing_rank, view_setup),
        cmocka_unit_test_setup(test_jobgate_foreign_rank, view_setup),
        cmocka_unit_test_setup(test_jobgate_extra_ranks, view_setup),
        cmocka_unit_test_setup(test_jobgate_communicators_of_other_ranks, view_setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
