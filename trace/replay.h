/* SPDX-License-Identifier: Apache-2.0 */
/*
 * replay.h - runs a trace's allocations and frees through the real pool
 * (pool/) on a simulated device, under a chosen policy, and measures what
 * happens: peaks, fragmentation over time, fences, out-of-memory.
 *
 * Addresses in the trace are the program's; the replay maps each to the
 * block the replayed pool gave, so a free reaches the right block whatever
 * the policy placed where. Segment, fence and out-of-memory records are
 * what the recording process saw: they are summed as "recorded" figures,
 * and a recorded flush is replayed as a flush.
 */
#ifndef CUPOOL_STATS_REPLAY_H
#define CUPOOL_STATS_REPLAY_H

#include <stdbool.h>
#include <stdint.h>

#include "pool.h"
#include "trace.h"

typedef struct replay_policy {
    const char *name;
    const char *what;        /* one line for the table's legend */
    pool_fit fit;
    size_t fence_interval;   /* 0 = the pool's default */
    bool no_fence;           /* freed blocks are reused at once, as under
                                CUPOOL_FENCE=none */
} replay_policy;

/* The policies `cupool replay` knows: best (the default), strict, first,
 * nosplit, none. NULL if name is none of them. */
const replay_policy *replay_policy_find(const char *name);
const replay_policy *replay_policy_at(int i); /* NULL past the last */

typedef struct replay_opts {
    unsigned device;          /* records of other devices are skipped */
    uint64_t capacity;        /* simulated device memory; 0 = unlimited */
    uint64_t max_reserved;    /* the pool's cap; 0 = none */
    const replay_policy *policy;
    size_t small_segment;     /* 0 = the pool's default */
    bool mid_set;             /* mid_max replaces the pool's default */
    size_t mid_max;           /* (CUPOOL_MID_MAX; 0 = no mid segments) */
    size_t trim_unit;         /* the device can give back the units of
                                 this size under free blocks inside
                                 segments, as CUPOOL_VMM does; 0 = no */
    bool stitch;              /* the device can map free units (trim_unit,
                                 or POOL_STITCH_UNIT, 2 MiB under
                                 max_reserved) into one new range, as
                                 CUPOOL_STITCH does */
    bool samples;             /* keep one sample per event (for plots) */
    uint64_t fence_lag;       /* ns: fences are asynchronous, as
                                 CUPOOL_FENCE=poll's, each done this long
                                 (trace time) after it began unless the
                                 pool forces it; 0 = every fence done at
                                 once, as a synchronous one */
} replay_opts;

/* The pool's state after one event. */
typedef struct replay_sample {
    uint64_t time;            /* ns since the trace began */
    uint64_t allocated, reserved, largest_free;
    uint64_t releasable;      /* in fully free segments */
    uint64_t recorded_reserved; /* from the trace's own segment records */
} replay_sample;

typedef struct replay_result {
    uint64_t events;          /* records of this device */
    uint64_t allocs, frees, fences, seg_reserves, stitches, stitched_bytes;
    uint64_t fences_forced;   /* (fence_lag) fences the pool made done */
    uint64_t peak_reserved, peak_allocated;
    uint64_t end_allocated, end_live_blocks;
    double frag_at_peak;      /* 1 - largest free / cached, when reserved
                                 last reached its peak */
    double frag_mean;         /* time-weighted over the trace */
    double frag_max;          /* over events with at least 1% of the peak
                                 so far cached (a near-empty cache says
                                 nothing) */
    uint64_t ooms;            /* recorded successes this replay could not serve */
    struct {                  /* the first of them (index: its number
                                 among this device's records) */
        uint64_t index, time, size, allocated, reserved, largest_free;
        bool fragmentation;   /* enough bytes were free or under the cap */
    } first_oom;
    uint64_t recorded_ooms, recorded_ooms_served; /* failed when recorded;
                                 of those, served by this replay */
    uint64_t unmatched_frees; /* frees of blocks the replay never made */
    uint64_t reordered;       /* frees found a few ns after the reuse of
                                 their block by another thread, applied
                                 before it (traces of other recorders:
                                 cupool's keeps each pool's lock order) */
    uint64_t recorded_fences, recorded_peak_reserved, recorded_flushes;
    replay_sample *sample;    /* with opts.samples: one per event */
    uint64_t nsamples;
} replay_result;

/* Replays t's records of opts->device on the simulated device
 * (sim_backend.h). Returns 0, or a negative errno (-EINVAL: bad policy or
 * config, -ENOMEM: host memory, -EOVERFLOW: the trace reserves more than
 * any device holds, -EPROTO: the device caught the pool releasing,
 * trimming or stitching memory it did not hold). */
int replay_run(const trace *t, const replay_opts *opts, replay_result *r);
void replay_result_free(replay_result *r);

/* Devices that appear in t, as a 256-bit set. */
void replay_devices(const trace *t, uint64_t set[4]);

#endif
