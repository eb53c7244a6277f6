/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sim_backend.h - the simulated device: a pool backend made of arithmetic.
 * `cupool replay` runs recorded traces on it, and the CPU tests check the
 * pool against it.
 *
 * Segments are address ranges handed out by a bump pointer (never reused,
 * so a stale address can never alias a new segment) against a capacity.
 * Every reserve, release and fence is counted, releases are checked against
 * what was reserved, and reserves can be made to fail on demand. With trim
 * on, the pool may give back parts of segments: the backend then holds
 * ranges, splits one at each trim, and checks that every trim lies inside
 * one range and every release is exactly one range. With stitch on, the
 * pool may map parts of ranges again at new addresses: the backend checks
 * each part, refuses releases and trims of memory a stitch maps, and
 * sim_backend_phys says which memory an address reaches (a range's own
 * addresses are its memory: they are never reused).
 */
#ifndef CUPOOL_TRACE_SIM_BACKEND_H
#define CUPOOL_TRACE_SIM_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "addrmap.h"
#include "pool.h"

/* The most addresses one segment or stitch may take: far beyond any
 * device, and far below where the bump pointer (or a sum of such sizes)
 * could wrap: a trace may ask for anything. */
#define SIM_SPACE ((uint64_t)1 << 62)

typedef struct sim_segment { uintptr_t base; size_t size; } sim_segment;

typedef struct sim_stitch {
    uintptr_t base;
    size_t size, n, room; /* room: addresses it may extend into */
    pool_span *parts;
} sim_stitch;

typedef struct sim_backend {
    uintptr_t next_base;
    size_t capacity;        /* 0 = unlimited */
    size_t used;
    int fail_reserves;      /* fail this many reserves with -ENOMEM */
    int fence_error;        /* nonzero: fences fail with this */
    int trim_error;         /* nonzero: trims fail with this */
    unsigned long reserves, releases, fences, bad_releases;
    unsigned long trims, bad_trims;
    size_t trim_unit;       /* 0: trim off */
    pool_addrmap segs;      /* the ranges held, by base: sim_segment */
    size_t nsegs;
    size_t seg_max;         /* the largest range ever held */
    /* Asynchronous fences (sim_backend_enable_async): the last ticket
     * begun, the last one done (the test moves it), and the calls seen. */
    uint64_t tickets, done;
    unsigned long begins, polls, forces;
    bool no_force;          /* a poll with force cannot make one done */
    /* Stitching (sim_backend_enable_stitch). */
    sim_stitch *st;
    size_t nst, st_cap;
    int stitch_error;       /* nonzero: stitches fail with this */
    unsigned long stitches, unstitches, bad_stitches, extends;
} sim_backend;

/* Initialises sim with a capacity (0 = unlimited) and fills *be with
 * callbacks bound to it (fence included). */
void sim_backend_init(sim_backend *sim, size_t capacity, pool_backend *be);
void sim_backend_fini(sim_backend *sim);
/* Sets the pool's unit for trims and stitches (be->trim_unit; a power of
 * two): segment bases become multiples of it. Call before pool_create. */
void sim_backend_set_unit(sim_backend *sim, pool_backend *be, size_t unit);
/* Sets the unit and lets the pool trim. Call before pool_create. */
void sim_backend_enable_trim(sim_backend *sim, pool_backend *be, size_t unit);
/* Gives the pool asynchronous fences: a fence begun is done once the test
 * raises sim->done to its ticket, or a poll with force (unless no_force)
 * makes the oldest done. fence_error fails begins and polls too. Call
 * before pool_create. */
void sim_backend_enable_async(sim_backend *sim, pool_backend *be);
/* Lets the pool stitch (needs the unit), and extend a stitch into twice
 * its first size. Call before pool_create. */
void sim_backend_enable_stitch(sim_backend *sim, pool_backend *be);
/* The memory address va reaches, through stitches, and in *len the bytes
 * from va on that stay contiguous in memory; 0 if va is mapped nowhere. */
uintptr_t sim_backend_phys(const sim_backend *sim, uintptr_t va, size_t *len);

#endif
