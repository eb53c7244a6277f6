/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test-vmm.c - CUPOOL_VMM and CUPOOL_STITCH, peers' access, IPC of pooled
 * blocks (also in VMM segments).
 */
#include "harness.h"

/* IPC of pooled blocks between two processes (rt_prog ipc spawns the
 * importer): the simulated memory is shared through files, as CUDA shares
 * device memory, so an importer given the segment's base instead of the
 * block's address reads the wrong bytes. */
static void test_ipc_handles(void **s)
{
    (void)s;
    result *r = run("ipc", "SIMCUDA_IPC=1", NULL);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->out, "ipc ok: blocks shared at their offsets"));
    assert_non_null(strstr(r->err, "a cupool handle from process"));
}

/* The same in VMM segments (stitched ones: below; on the GPU both run,
 * scripts/gpu-share): every handle is cupool's,
 * the importer maps the block's pieces (handed over by the exporter as
 * file descriptors) at the block's offset; an importer without cupool is
 * refused both. Then a block stitched from two holes, opened at its start
 * and inside its second half, reads and writes the exporter's bytes; and
 * a 1 GiB block with 1024 descriptors allowed (it failed when every piece
 * travelled at once). */
static void test_ipc_vmm(void **s)
{
    (void)s;
    result *r = run("ipc", "SIMCUDA_IPC=1", "CUPOOL_VMM=1", "CUPOOL_FENCE_INTERVAL=1", NULL);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->out, "ipc ok: blocks shared at their offsets"));
    /* A new block where a freed one was has a handle of its own; the old
     * handle is refused, not opened on the new block. */
    assert_non_null(strstr(r->out, "again: same place 1, same handle 0"));
    r = run("ipc_stitched", "SIMCUDA_IPC=1", "CUPOOL_STITCH=1",
                    "CUPOOL_VMM_UNIT=2M", NULL);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->out, "ipc stitched ok"));
    /* 512 pieces under a limit of 1024 descriptors: a batch at a time */
    r = run("ipc_large", "SIMCUDA_IPC=1", "CUPOOL_VMM=1", NULL);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->out, "ipc large ok"));
}

/* CUPOOL_VMM: the pool gives back the granules behind a live block to
 * serve a request under the cap, after waiting for the device; without
 * driver support it says so and uses cudaMalloc'd segments (the scenario
 * then stops at its first check: the driver saw a cudaMalloc). */
static void test_vmm(void **s)
{
    (void)s;
    result *r = run("vmm", "CUPOOL_VMM=1", "CUPOOL_MAX_RESERVED=48M", NULL);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->out, "unmapped 15 granules, 0 before"));
    r = run_expecting(1, "vmm", "CUPOOL_VMM=1", "CUPOOL_MAX_RESERVED=48M",
                      "SIMCUDA_NO_VMM=1", NULL);
    assert_int_equal(r->status, 1);
    assert_non_null(strstr(r->err, "does not support virtual memory management"));
    assert_non_null(strstr(r->out, "mallocs == 0"));
}

/* VMM segments grant access to every device the program enabled peer
 * access from, mapped before the enabling or after, through the runtime
 * or the driver (rt_prog's vmm_peer). */
static void test_vmm_peer(void **s)
{
    (void)s;
    PASSES("vmm_peer", "CUPOOL_VMM=1");
    PASSES("vmm_peer", "CUPOOL_STITCH=1");
}

/* CUPOOL_STITCH: the holes' pieces mapped again serve a request with
 * nothing new in use; an unstitched range is unmapped only after the
 * device was waited for. Under a cap the pieces are 2 MiB granules: two
 * 8 MiB holes are 8 mappings; without one they are 8 MiB: two 16 MiB
 * holes are 4. Under CUPOOL_VMM alone the same 16 MiB come from a trim and
 * a new segment (the driver sees granules unmapped). */
static void test_stitch(void **s)
{
    (void)s;
    result *r = run("stitch", "CUPOOL_STITCH=1", "CUPOOL_MAX_RESERVED=28M",
                    "CUPOOL_STATS_AT_EXIT=1", "CUPOOL_STATS_FORMAT=json", NULL);
    assert_int_equal(r->status, 0);
    /* Two stitches, each of both 8 MiB holes: the statistics say so. */
    assert_non_null(strstr(r->err, "\"stitches\":2,\"stitched_bytes\":33554432,"));
    assert_non_null(strstr(r->out, "stitched: 8 mappings, 0 bytes more in use, 0 unmapped"));
    assert_non_null(strstr(r->out, "restitched: 4194304 bytes more in use, 0 unmapped"));
    assert_non_null(strstr(r->out, "flushed: 0 bytes mapped, 0 in use, 0 unsynced unmaps"));
    /* The default poll fence never synchronizes ("syncs":0): every device
     * synchronization the driver saw was one to unmap, and vmm_syncs
     * counts them all. */
    const char *at = strstr(r->out, "unsynced unmaps, ");
    assert_non_null(at);
    unsigned long syncs = strtoul(at + strlen("unsynced unmaps, "), NULL, 10);
    char want[64];
    snprintf(want, sizeof(want), "\"syncs\":0,\"vmm_syncs\":%lu,", syncs);
    assert_true(syncs > 0);
    assert_non_null(strstr(r->err, want));
    r = run("stitch", "CUPOOL_STITCH=1", "RT_HOLE_MIB=16", "RT_UNIT_MIB=8", NULL);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->out, "stitched: 4 mappings, 0 bytes more in use, 0 unmapped"));
    assert_non_null(strstr(r->out, "restitched: 8388608 bytes more in use, 0 unmapped"));
    assert_non_null(strstr(r->out, "flushed: 0 bytes mapped, 0 in use, 0 unsynced unmaps"));
    r = run("stitch_extend", "CUPOOL_STITCH=1", "CUPOOL_VMM_UNIT=2M", NULL);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->out, "extended: same address 1, 2 mappings, 0 bytes "
                                   "more in use, 0 unmapped"));
    assert_non_null(strstr(r->out, "flushed: 0 bytes mapped, 0 in use, 0 unsynced unmaps"));
    /* A unit the device cannot use: said, and the granule is used. */
    r = run("stitch", "CUPOOL_STITCH=1", "CUPOOL_VMM_UNIT=3M",
            "CUPOOL_MAX_RESERVED=28M", NULL);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->err, "CUPOOL_VMM_UNIT=3145728: not a power-of-two"));
    assert_non_null(strstr(r->out, "stitched: 8 mappings, 0 bytes more in use, 0 unmapped"));
    r = run_expecting(1, "stitch", "CUPOOL_VMM=1", "CUPOOL_MAX_RESERVED=28M", NULL);
    assert_int_equal(r->status, 1);
    assert_non_null(strstr(r->out, "stitched: 8 mappings, 0 bytes more in use, 8 unmapped"));
}

/* CUPOOL_STITCH=auto, the default: stitching while PyTorch's caching
 * allocator is off (PYTORCH_NO_CUDA_MEMORY_CACHING=1), also when the
 * program sets it after cupool loaded (before its first allocation, as
 * PyTorch reads it); not otherwise ("0" leaves PyTorch's cache on), nor
 * when CUPOOL_STITCH=0 says so. */
static void test_stitch_auto(void **s)
{
    (void)s;
    static const char on[] = "stitched: 4 mappings, 0 bytes more in use, 0 unmapped",
                      off[] = "stitched: 0 mappings";
    static const struct {
        const char *env[2]; /* NULL-terminated early where fewer */
        int status;
        const char *want;
    } cases[] = {
        {{"PYTORCH_NO_CUDA_MEMORY_CACHING=1"}, 0, on},
        {{"RT_SETENV=PYTORCH_NO_CUDA_MEMORY_CACHING=1"}, 0, on},
        {{NULL}, 1, off},
        {{"PYTORCH_NO_CUDA_MEMORY_CACHING=0"}, 1, off},
        {{"PYTORCH_NO_CUDA_MEMORY_CACHING=1", "CUPOOL_STITCH=0"}, 1, off},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        result *r = run_expecting(cases[i].status, "stitch", "RT_HOLE_MIB=16", "RT_UNIT_MIB=8",
                                  cases[i].env[0], cases[i].env[1], NULL);
        assert_int_equal(r->status, cases[i].status);
        assert_non_null(strstr(r->out, cases[i].want));
    }
}

const struct CMUnitTest shim_vmm_tests[] = {
    cmocka_unit_test(test_vmm_peer),
    cmocka_unit_test(test_vmm),
    cmocka_unit_test(test_stitch),
    cmocka_unit_test(test_stitch_auto),
    cmocka_unit_test(test_ipc_handles),
    cmocka_unit_test(test_ipc_vmm),
};
const size_t shim_vmm_count = sizeof(shim_vmm_tests) / sizeof(shim_vmm_tests[0]);
