/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stats.h - cupool's statistics: one list of fields, expanded into the
 * snapshot structs, the human table, the JSON and the Prometheus names;
 * and the live page, a small shared-memory file per process that the shim
 * keeps current and the CLI reads.
 *
 * Knows nothing of CUDA. Fed from pool/ (pool_stats) and the shim through
 * plain structs.
 */
#ifndef CUPOOL_STATS_H
#define CUPOOL_STATS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "pool.h"
#include "text.h"

/* cupool's version: `cupool --version`, the JSON's "version", Prometheus's
 * cupool_build_info. */
#define CUPOOL_VERSION "0.9.0"

#define STATS_MAX_DEVICES 64
#define STATS_UNKNOWN UINT64_MAX   /* a figure nobody could measure */

/* The shim's own counters per device, in the order the rows below show
 * them: X(name, unit, kind, help), every one a COUNTER. Each becomes an
 * atomic of the device's state (shim/device/devstate.h: SHIM_DEV_<name>,
 * counted with shim_device_count) and is copied into stats_device by
 * shim_device_counts_fill: a new one is its row here and the line that
 * counts it. */
#define STATS_DEVICE_COUNTS(X)                                                \
    X(syncs, COUNT, COUNTER, "device synchronizations (CUPOOL_FENCE=sync)")   \
    X(vmm_syncs, COUNT, COUNTER, "device synchronizations done so that VMM "  \
      "memory queued work may still use could be unmapped (CUPOOL_VMM, "     \
      "CUPOOL_STITCH)")                                                       \
    X(fence_orders, COUNT, COUNTER, "poll fences done by making the non-"   \
      "blocking streams wait for the legacy stream's work (while CUPTI "     \
      "watches, owe the wait until their next work), not by completion "     \
      "(CUPOOL_FENCE=poll)")                                                  \
    X(fence_waits, COUNT, COUNTER, "streams made to wait for another's work by " \
      "fences (one cudaStreamWaitEvent each)")                                \
    X(fences_skipped, COUNT, COUNTER, "fences that needed no CUDA call: no "  \
      "GPU work since the last (CUPOOL_CUPTI)")                               \
    X(fence_streams_left, COUNT, COUNTER, "non-blocking streams poll fences " \
      "left out: no work queued on them since a fence covered them, or only " \
      "collectives on other memory (CUPOOL_CUPTI)")                           \
    X(cap_refusals, COUNT, COUNTER, "requests the cap (CUPOOL_MAX_RESERVED) " \
      "or the group's budget (CUPOOL_GROUP) refused, each counted once "     \
      "however often retried: allocations their pool could not fit by "      \
      "returning its own idle segments (oom_failures counts these, the "     \
      "device's own refusals and each retry), and calls passed on")

/* Per device. X(name, unit, kind, help): unit BYTES or COUNT; kind GAUGE
 * or COUNTER (Prometheus: *_bytes for byte gauges, *_total for counters).
 * Rows P(X, name, from, ...) are the pool's statistics, pool_stats' field
 * from (the one place the two lists meet; stats_device_from_pool copies
 * them); rows X(...) are the shim's own, STATS_DEVICE_COUNTS its counters. */
#define STATS_DEVICE_ROWS(X, P)                                               \
    P(X, requested, requested, BYTES, GAUGE, "bytes the program asked for, live") \
    P(X, requested_peak, requested_peak, BYTES, GAUGE, "peak of requested")   \
    P(X, allocated, allocated, BYTES, GAUGE, "bytes of live blocks, rounded") \
    P(X, allocated_peak, allocated_peak, BYTES, GAUGE, "peak of allocated")   \
    P(X, reserved, reserved, BYTES, GAUGE, "bytes the pool holds from the driver") \
    P(X, reserved_peak, reserved_peak, BYTES, GAUGE, "peak of reserved")      \
    P(X, cached, cached, BYTES, GAUGE, "reserved but not allocated: free in the pool") \
    P(X, cached_peak, cached_peak, BYTES, GAUGE, "peak of cached")            \
    P(X, largest_free, largest_free, BYTES, GAUGE, "largest free block")      \
    P(X, releasable, idle_bytes, BYTES, GAUGE, "cached bytes in segments with " \
      "no live block: what a flush returns now (the rest of cached stays, in " \
      "segments that hold live blocks)")                                      \
    X(cap, BYTES, GAUGE, "cap on reserved (0 = none)")                        \
    X(outside_pool, BYTES, GAUGE, "device memory the process holds outside "  \
      "the pool: context, libraries, pass-through (from NVML)")               \
    X(passed, BYTES, GAUGE, "bytes allocated through calls passed on "        \
      "(stream-ordered, managed, pitched, cuMemCreate), counted against the cap") \
    X(passed_peak, BYTES, GAUGE, "peak of passed")                            \
    X(nccl_held, BYTES, GAUGE, "device memory the NCCL communicators on this " \
      "device hold, as ncclCommMemStats tells (NCCL 2.29.7 on; null where NCCL " \
      "cannot tell, 0 with no communicator here)")                            \
    X(nccl_suspendable, BYTES, GAUGE, "of it, what ncclCommSuspend could give " \
      "back (null where NCCL cannot tell)")                                   \
    X(framework_allocated, BYTES, GAUGE, "PyTorch's own figure: bytes of its " \
      "live tensors (read by cupool's flush worker; framework_read_at)")     \
    X(framework_reserved, BYTES, GAUGE, "PyTorch's own figure: bytes it "      \
      "reserves (from cupool), its cache included")                          \
    X(framework_inactive, BYTES, GAUGE, "PyTorch's own figure: bytes of "      \
      "inactive split blocks in its segments")                                \
    P(X, free_blocks, free_blocks, COUNT, GAUGE, "free blocks")               \
    P(X, segments, segments, COUNT, GAUGE, "segments held from the driver")   \
    P(X, allocs, allocs, COUNT, COUNTER, "allocations served")                \
    P(X, frees, frees, COUNT, COUNTER, "frees")                               \
    P(X, hits, hits, COUNT, COUNTER, "allocations served from the cache")     \
    P(X, driver_allocs, seg_reserves, COUNT, COUNTER, "segments reserved from the driver") \
    P(X, driver_frees, seg_releases, COUNT, COUNTER, "segments returned to the driver") \
    P(X, driver_alloc, reserved_bytes_total, BYTES, COUNTER, "bytes reserved from the driver") \
    P(X, driver_free, released_bytes_total, BYTES, COUNTER, "bytes returned to the driver") \
    P(X, trims, trims, COUNT, COUNTER, "free ranges inside segments returned to the " \
      "driver (CUPOOL_VMM)")                                                  \
    P(X, stitches, stitches, COUNT, COUNTER, "segments stitched from free "   \
      "memory already held and fresh memory for the rest, and idle ones "     \
      "grown in place (CUPOOL_STITCH)")                                       \
    P(X, stitched_bytes, stitched_bytes_total, BYTES, COUNTER, "bytes those "  \
      "stitches mapped of memory already held, not fresh (CUPOOL_STITCH)")    \
    P(X, fences, fences, COUNT, COUNTER, "fences before reuse (fences_skipped of them " \
      "needed no CUDA call)")                                                 \
    P(X, fence_deferrals, fence_deferrals, COUNT, COUNTER, "fences impossible (graph capture)") \
    P(X, fence_failures, fence_failures, COUNT, COUNTER, "fences CUDA refused (the allocation " \
      "that asked for one failed)")                                           \
    P(X, fence_forced, fence_forced, COUNT, COUNTER, "poll fences forced done by ordering the " \
      "streams rather than grow, and barriers when it could not grow "        \
      "(CUPOOL_FENCE=poll)")                                                  \
    STATS_DEVICE_COUNTS(X)                                                    \
    P(X, flushes, flushes, COUNT, COUNTER, "flushes of the cache")            \
    P(X, retries, retries, COUNT, COUNTER, "allocations retried after releasing cache") \
    P(X, oom_failures, failures, COUNT, COUNTER, "allocations that failed for memory") \
    P(X, bad_frees, bad_frees, COUNT, COUNTER, "frees refused (double, interior)")

/* X(name, unit, kind, help) over every field of stats_device. */
#define STATS_POOL_ROW(X, name, from, unit, kind, help) X(name, unit, kind, help)
#define STATS_DEVICE_FIELDS(X) STATS_DEVICE_ROWS(X, STATS_POOL_ROW)

/* The frameworks whose cache a flush releases, in the order it does
 * (shim/process/framework.c's table says how): F(X, name, label, help).
 * Each is the process counter framework_<name>, the bytes its cache gave
 * back; label names its part in a flush's answer and in the program's log
 * ("torch.cuda.empty_cache 18.00 MiB"). A new one is its row here and its
 * row in framework.c's table. */
#define STATS_FRAMEWORKS(F, X)                                                \
    F(X, torch, "torch.cuda.empty_cache", "of those, torch.cuda.empty_cache's") \
    F(X, cupy, "CuPy's pool", "of those, CuPy's memory pool's")             \
    F(X, paddle, "paddle.device.cuda.empty_cache", "of those, PaddlePaddle's " \
      "(paddle.device.cuda.empty_cache)")
#define STATS_FRAMEWORK_FIELD(X, name, label, help) \
    X(framework_##name, BYTES, COUNTER, help)
/* The frameworks a flush finds but cannot release (framework.c's table
 * rows without a release), as framework_unable and cupool flush name
 * them. */
#define STATS_FRAMEWORKS_UNABLE "JAX"

/* Per process. */
#define STATS_PROCESS_FIELDS(X)                                               \
    X(foreign_frees, COUNT, COUNTER, "cudaFree of pointers no pool owns")     \
    X(passthrough_pitch, COUNT, COUNTER, "cudaMallocPitch calls passed on")   \
    X(passthrough_3d, COUNT, COUNTER, "cudaMalloc3D calls passed on")         \
    X(passthrough_managed, COUNT, COUNTER, "cudaMallocManaged calls passed on") \
    X(passthrough_async, COUNT, COUNTER, "cudaMallocAsync calls passed on")   \
    X(passthrough_create, COUNT, COUNTER, "cuMemCreate calls passed on")      \
    X(signal_flushes, COUNT, COUNTER, "flushes asked for by signal")          \
    X(requested_flushes, COUNT, COUNTER, "flushes asked for by cupool flush") \
    X(requested_dumps, COUNT, COUNTER, "dumps asked for by cupool dump")      \
    X(flushed, BYTES, COUNTER, "bytes returned by flushes")                   \
    X(framework_flushes, COUNT, COUNTER, "flushes that first released a "    \
      "framework's cache, idle or not (framework_<name> below: whose)")      \
    X(framework_flushed, BYTES, COUNTER, "bytes the frameworks' caches gave " \
      "back in those flushes (returned to the driver with cupool's)")        \
    STATS_FRAMEWORKS(STATS_FRAMEWORK_FIELD, X)                                \
    X(framework_late, COUNT, COUNTER, "flushes whose framework release "     \
      "came late: the program's Python lock (GIL) held in a long call, or a " \
      "graph capture under way; each runs when it can, and counts then")     \
    X(flushes_landed, COUNT, COUNTER, "late flushes that ran after their "   \
      "asker stopped waiting (counted in flushed when they did)")             \
    X(framework_deferred, COUNT, COUNTER, "flushes that waited for the "     \
      "program's CUDA graph captures to end before they ran")                 \
    X(framework_unable, COUNT, COUNTER, "flushes of a program using "        \
      STATS_FRAMEWORKS_UNABLE ", "                                            \
      "whose memory cannot be given back from outside")                       \
    X(group_reclaims, COUNT, COUNTER, "times this process, refused by its "   \
      "group's budget (CUPOOL_GROUP), asked the other members to flush")      \
    X(group_flushes, COUNT, COUNTER, "flushes this process made because "     \
      "another member of its group asked")                                    \
    X(group_waiting_since, COUNT, GAUGE, "when a thread of this process "    \
      "began to wait for its turn in its group (CLOCK_REALTIME, ns; 0 = none " \
      "waits)")                                                               \
    X(group_waiting_bytes, BYTES, GAUGE, "what it waits for")               \
    X(framework_read_at, COUNT, GAUGE, "when the framework_* device figures " \
      "were read (CLOCK_REALTIME, ns; 0 = never)")                            \
    X(oom_reports, COUNT, COUNTER, "out-of-memory reports printed")           \
    X(trace_records, COUNT, COUNTER, "trace records written (CUPOOL_TRACE)")  \
    X(trace_lost, COUNT, COUNTER, "trace records lost (write error)")        \
    X(cupti_starts, COUNT, COUNTER, "times cupool began watching GPU work "   \
      "through CUPTI (CUPOOL_CUPTI: 1 at the first pool, auto at the 8th "   \
      "fence after the first NCCL call)")                                     \
    X(cupti_handovers, COUNT, COUNTER, "times the program (a profiler) took " \
      "CUPTI from cupool, which fences as without it after")                   \
    X(nccl_calls, COUNT, COUNTER, "NCCL calls the program made (cupool pause " \
      "pauses such a process with its whole job, its communicators suspended " \
      "first: NCCL 2.29.7 on)")                                               \
    X(nccl_gate_closes, COUNT, COUNTER, "times a controller closed the "      \
      "program's NCCL gate, open till then (cupool pause of its job, cupool " \
      "flush --nccl)")                                                        \
    X(nccl_suspends, COUNT, COUNTER, "communicators cupool suspended (cupool " \
      "pause, cupool flush --nccl)")                                          \
    X(nccl_freed, BYTES, COUNTER, "bytes those suspends gave back, as NCCL "  \
      "tells (ncclCommMemStats)")                                             \
    X(nccl_lazy_resumes, COUNT, COUNTER, "communicators resumed at the "      \
      "program's next call on them, after cupool flush --nccl")               \
    X(nccl_comms, COUNT, GAUGE, "NCCL communicators the program holds now "  \
      "(made and not yet destroyed or aborted; cupool job lists them)")       \
    X(paused_since, COUNT, GAUGE, "when cupool pause checkpointed the process " \
      "(CLOCK_REALTIME, ns; 0 = running)")                                    \
    X(paused_needs, BYTES, GAUGE, "device memory the paused process held, "   \
      "which cupool resume gives back to it")

typedef struct stats_device {
    int32_t device;   /* CUDA device index; -1 = slot unused */
#define STATS_X_FIELD(name, unit, kind, help) uint64_t name;
    STATS_DEVICE_FIELDS(STATS_X_FIELD)
} stats_device;

typedef struct stats_process {
    STATS_PROCESS_FIELDS(STATS_X_FIELD)
#undef STATS_X_FIELD
} stats_process;

/* An NCCL communicator a process holds, as its page lists it (cupool
 * job): id names it alike in every rank of its job (a hash of its
 * ncclUniqueId, or of its parent's id and color for a split). */
#define STATS_MAX_COMMS 16
typedef struct stats_comm {
    uint64_t id;
    int32_t rank, nranks;
    int32_t device;           /* -1 if NCCL could not tell */
    uint32_t suspended;       /* 1 while cupool holds it suspended */
    uint64_t issued;          /* NCCL operations the program issued on it */
} stats_comm;

/* A process's NCCL gate (cupool pause of a job, cupool flush --nccl): the
 * controller closes it, lets ranks that are behind catch up to its
 * targets, has the communicators suspended and resumed, opens it. */
enum stats_gate_state { STATS_GATE_OPEN, STATS_GATE_CLOSED };
typedef struct stats_gate {
    uint32_t state;           /* stats_gate_state */
    uint32_t active;          /* threads past it, inside an NCCL call or group */
    uint32_t waiting;         /* threads held at it */
    uint32_t can_suspend;     /* 1: this NCCL has ncclCommSuspend/Resume */
    int32_t error;            /* the last gate request's: 0, or an NCCL result,
                                 or a negative errno */
    uint32_t pad;
    uint64_t freed;           /* bytes the last suspend gave back, as NCCL
                                 tells (STATS_UNKNOWN if it cannot) */
    char why[160];            /* the last failure, in words */
} stats_gate;

/* cupool's own move of a process's device memory (cupool pause and
 * resume, STATS_REQ_PARK and STATS_REQ_UNPARK): the last request's
 * outcome. */
enum stats_park_state { STATS_PARK_RUNNING, STATS_PARK_PARKED };
typedef struct stats_park {
    uint32_t state;           /* stats_park_state */
    int32_t error;            /* the last request's: 0 or a negative errno */
    uint64_t moved;           /* bytes the last request copied */
    uint64_t host;            /* pinned host bytes kept for the copies */
    uint64_t left;            /* device bytes the process still held after
                                 the last park (cuMemGetInfo's view of the
                                 device: every process's), or 0 */
    uint32_t gate_us, sync_us, pin_us, copy_us, map_us; /* the last request's
                                 steps: the gate, the devices' work, host
                                 memory pinned, the copies, unmap or map */
    uint32_t streams;         /* copy streams per device */
    char why[160];            /* the last refusal or failure, in words */
} stats_park;

/* One process's view: what a page holds and what formatters print. */
typedef struct stats_view {
    int32_t pid;
    char comm[32];
    uint64_t updated_ns;      /* CLOCK_REALTIME of the last update */
    int32_t flush_signal;     /* 0 = none */
    uint32_t ndevices;        /* used entries of dev */
    uint32_t ncomms;          /* used entries of comms (proc.nccl_comms may be more) */
    stats_comm comms[STATS_MAX_COMMS];
    stats_gate gate;
    stats_park park;
    stats_process proc;
    stats_device dev[STATS_MAX_DEVICES];
} stats_view;

/* Fills the pool-derived fields of d from a pool snapshot. */
void stats_device_from_pool(stats_device *d, int device, const pool_stats *p);

/* The share of cached bytes that one request cannot have: 1 - what the
 * largest request the cache can serve gets / cached. That request gets the
 * largest free block, or, if more, the releasable bytes (whole free
 * segments, which a flush or a cap-bound request gives back and takes as
 * one segment). 0 when nothing is cached, and for a cache of idle
 * segments alone: such a cache is not fragmented, only kept. */
double stats_frag(uint64_t largest_free, uint64_t releasable, uint64_t cached);
double stats_fragmentation(const stats_device *d);

/* Whether a request of size bytes that found no room failed for
 * fragmentation: the free bytes are there, in the cache or under the limit
 * once the cache is given back, but in pieces it does not fit. limit is the
 * cap or device size that stopped it, 0 if neither did. Nothing cached is
 * never fragmentation (a limit below one segment is not). */
bool stats_oom_is_fragmentation(uint64_t size, uint64_t allocated,
                                uint64_t cached, uint64_t limit);

/* s as a JSON string, quotes included: '"' and '\\' escaped, every byte
 * outside printable ASCII as \u00XX. Into buf as a formatter does; returns
 * the length it needed (at most 6 per byte of s, plus 2). */
size_t stats_json_string(const char *s, char *buf, size_t len);


/* What two flush requests want together (0 = everything: framework.h and
 * groupseg.h): 0 if either is 0, else the smaller. */
static inline uint64_t stats_want_merge(uint64_t a, uint64_t b)
{
    return !a || !b ? 0 : a < b ? a : b;
}

/* Parses a size: digits with an optional K, M, G or T suffix, an optional
 * i after it and an optional B (all binary: "512M", "20GiB", "4096").
 * Returns 0 with *size set, or -EINVAL (anything else, or overflow). The
 * one parser of sizes: options (shim/base/config.c) and the trace tools. */
int stats_parse_size(const char *s, uint64_t *size);

/* Writes n as "1.50 GiB" (or "512 B", "-" for STATS_UNKNOWN); returns buf. */
const char *stats_fmt_bytes(uint64_t n, char *buf, size_t len);

/* ---- formatters (stats/format.c) ----------------------------------------
 * Each writes into buf (NUL-terminated, truncated at len) and returns the
 * length it needed, as snprintf does. */

/* Table of views, one row per process and device, in the order given. */
size_t stats_format_table(const stats_view *const *v, size_t n, char *buf,
                          size_t len);
/* The same with one more column, head, whose text for view i is extra[i]
 * (printable already; NULL: none). */
size_t stats_format_table_with(const stats_view *const *v, const char *head,
                               const char *const *extra, size_t n, char *buf, size_t len);
/* Every field of one view, one "device N  name  value" line each. */
size_t stats_format_detail(const stats_view *v, char *buf, size_t len);
enum stats_format { STATS_TABLE, STATS_JSON, STATS_PROMETHEUS };

/* The pieces the formats are made of, for a format of another view (a
 * group's, group/format.c) to look the same: a figure in at most 6
 * characters ("146M", "4.00G"; "-" when unknown), a JSON string (quotes
 * included), a Prometheus label value (escaped, no quotes), a metric
 * family's HELP and TYPE lines. */
const char *stats_fmt_short(uint64_t n, char *buf, size_t len);
void stats_put_json_string(text_buf *o, const char *s);
void stats_put_label(text_buf *o, const char *s);
void stats_put_family(text_buf *o, const char *m, int counter, const char *help);

/* A group's budget and each member's share per device (cupool stat
 * --group), in the format asked for (group/format.c). */
struct group_view;
size_t stats_format_group(const struct group_view *g, enum stats_format f, char *buf,
                          size_t len);
/* One JSON object per view, one line each. */
size_t stats_format_json(const stats_view *v, char *buf, size_t len);
/* Prometheus text exposition of views, cupool_ names, pid/device/comm
 * labels. */
size_t stats_format_prometheus(const stats_view *const *v, size_t n,
                               char *buf, size_t len);
/* The same, with more labels per view: extra[i] (escaped already, as
 * stats_prometheus_label writes them, comma-separated) or NULL. */
size_t stats_format_prometheus_with(const stats_view *const *v, const char *const *extra,
                                    size_t n, char *buf, size_t len);
/* name="value" with the value escaped for the exposition format (\\, \"
 * and \n escaped; UTF-8 text kept; every other control character and
 * every byte that is not UTF-8 written as U+FFFD), into buf. */
void stats_prometheus_label(const char *name, const char *value, char *buf, size_t len);

/* ---- the live page (stats/page.c) ---------------------------------------
 * One file per process, <pid namespace>-<pid> in its user's own directory
 * stats_page_dir()/cupool-<uid> (mode 0700), mode 0600: the statistics
 * (the writer publishes with a seqlock; readers retry while it is odd or
 * moves) and the control channel (requests counted up by readers, answers
 * by the process's helper thread). Readers trust only a regular file of
 * the process's user, mode 0600, one link, mapped by the live process it
 * names. */

typedef struct stats_page stats_page;

/* What a reader can ask a process for. */
typedef enum stats_request {
    STATS_REQ_FLUSH, /* return the cache to the driver */
    STATS_REQ_DUMP,  /* write the statistics where CUPOOL_STATS_FILE says */
    STATS_REQ_VIEW,  /* read the framework's own figures (at most once a
                        second; answered when read, or at once without) */
    STATS_REQ_NCCL,  /* act on the NCCL gate as stats_nccl_ask says */
    STATS_REQ_PARK,  /* stop the program's CUDA calls and move its VMM
                        segments' memory to host memory (stats_park) */
    STATS_REQ_UNPARK, /* bring it back and let the calls go on */
    STATS_NREQUESTS
} stats_request;

/* What a controller asks of a process's NCCL gate (STATS_REQ_NCCL):
 *   CLOSE    close it (again: new targets): a thread at an NCCL call
 *            outside any group waits there, unless its communicator's count
 *            of operations is below its target (id[i]: target[i]; none: it
 *            stops where it is); it opens by itself after hold_s seconds
 *            unless a suspend came;
 *   SUSPEND  with the gate closed and no thread past it: wait for the
 *            devices' work, suspend every communicator (all or none);
 *   RESUME   resume every communicator suspended (a barrier across ranks);
 *   OPEN     open it; a communicator still suspended is resumed at the
 *            program's next call on it. */
enum stats_nccl_want { STATS_NCCL_CLOSE = 1, STATS_NCCL_SUSPEND, STATS_NCCL_RESUME,
                       STATS_NCCL_OPEN };
typedef struct stats_nccl_ask {
    uint32_t want;            /* stats_nccl_want */
    uint32_t ntargets;
    uint32_t hold_s;
    uint32_t pad;
    uint64_t id[STATS_MAX_COMMS], target[STATS_MAX_COMMS];
} stats_nccl_ask;

/* Where the users' page directories are: $CUPOOL_PAGE_DIR, else
 * /dev/shm, else /tmp. */
const char *stats_page_dir(void);

/* Opens this user's own directory in stats_page_dir() (cupool-<uid>, mode
 * 0700), making it if need be: its descriptor, or -errno with *why:
 * -EACCES (the base is unsafe), -EEXIST (another user made a directory of
 * that name first), another (it could not be made). path
 * gets its path. Pages live there, and group segments unless it cannot
 * be had (groupseg.h says where they meet then). */
int stats_user_dir(char *path, size_t len, const char **why);

/* Start time of process pid in clock ticks since boot (/proc/PID/stat
 * field 22), or 0 if it is gone (a zombie too: it holds nothing any more):
 * with the pid, it names one process for its life (a reused pid has
 * another). */
uint64_t stats_start_time(int pid);

/* Creates this process's page, its memory reserved (a full tmpfs fails
 * here, never later). Returns NULL with *why on failure. *passed_over is
 * set when the user's directory was another user's and a private one was
 * made instead. */
stats_page *stats_page_create(const char **why, bool *passed_over);
/* The page's path. */
const char *stats_page_path(const stats_page *p);
/* Publishes a view. Single writer. */
void stats_page_publish(stats_page *p, const stats_view *v);
/* The newest ticket of request r not yet answered, or 0. */
uint64_t stats_page_pending(const stats_page *p, stats_request r);
/* Marks every ticket of r up to ticket answered. */
void stats_page_answer(stats_page *p, stats_request r, uint64_t ticket);
/* Unmaps and removes the page. */
void stats_page_remove(stats_page *p);
/* Unmaps the page and frees p, leaving the file (a forked child). */
void stats_page_forget(stats_page *p);

/* ---- blocks exported for IPC, on the page --------------------------------
 * A pooled block that does not start its segment is exported as the
 * segment's handle (opaque, STATS_IPC_HANDLE bytes) and the block's
 * offset, kept on the exporter's page; the importer reads them by the
 * exporter's pid, a slot and a nonce, with the page's ownership checks. */
#define STATS_IPC_HANDLE 64
#define STATS_IPC_EXPORTS 256

/* A random nonce for an export slot, never 0 (which marks a free slot). */
uint64_t stats_nonce(void);

/* Records an export on p: 0 and the slot and nonce to hand out. */
int stats_page_export(stats_page *p, const void *handle, uint64_t offset, uint64_t size,
                      int32_t device, uint32_t *slot, uint64_t *nonce);
/* Reads pid's export at slot if its nonce is nonce: 0, -ESTALE (exported
 * again since, or never), -EINVAL, or as stats_page_read. */
int stats_page_import(int pid, uint32_t slot, uint64_t nonce, void *handle,
                      uint64_t *offset, uint64_t *size, int32_t *device);

/* Reads the page of pid into *v. 0, -ENOENT (no page), -ESRCH (a page
 * whose process is gone or has exec'd: stale), -EPROTO (not a cupool
 * page), -EPERM (a file named like it that is not a regular file of the
 * process's user, mode 0600, one link), -EAGAIN (kept changing while
 * read). Root reads any user's process's page; others their own. */
int stats_page_read(int pid, stats_view *v);
/* Reads the file open at fd, which process proc_pid (in the reader's pid
 * namespace, whose own pid namespace calls it page_pid) is known to map
 * (node.c finds it from the process's maps), as that process's page, of
 * owner (its user as the reader sees it): the checks of stats_page_read,
 * the mapping proven by the caller. 0 or as stats_page_read. */
int stats_page_read_mapped(int fd, int proc_pid, int page_pid, uid_t owner, stats_view *v);
/* Calls fn on each line of /proc/PID/maps (without its newline; a line
 * longer than 1023 bytes cut) until fn returns true: 1 if it did, 0 if not
 * (or pid is gone), -1 if the maps cannot be read (another user's
 * process, or one that made itself not dumpable). */
int stats_maps_find(int pid, bool (*fn)(const char *line, void *arg), void *arg);
/* Opens pid's page (as stats_page_read finds it) and locks it (flock,
 * LOCK_EX, not waiting): the descriptor, which holds the lock until it is
 * closed, or -EWOULDBLOCK (another holds it), or as stats_page_read. */
int stats_page_lock(int pid);
/* Asks pid for r: *ticket is the ticket to wait for. 0 or as
 * stats_page_read. Catches SIGBUS while it runs: for readers, not for the
 * shim. */
int stats_page_ask(int pid, stats_request r, uint64_t *ticket);
/* Asks pid's NCCL gate for *a (STATS_REQ_NCCL): *ticket is the ticket to
 * wait for. 0 or as stats_page_ask. */
int stats_page_ask_nccl(int pid, const stats_nccl_ask *a, uint64_t *ticket);
/* The writer's side: what the last STATS_REQ_NCCL asked, into *a. */
void stats_page_nccl_asked(const stats_page *p, stats_nccl_ask *a);
/* Marks pid's page as paused by cupool pause since since_ns (CLOCK_REALTIME;
 * 0: running again), needing needs bytes back: its views then say so
 * (paused_since, paused_needs), whatever the process publishes. 0 or as
 * stats_page_ask. */
int stats_page_mark_paused(int pid, uint64_t since_ns, uint64_t needs);
/* Asks pid for r and waits up to timeout seconds for its answer: 0 with
 * *before and *after its views around it, -ETIMEDOUT, or as
 * stats_page_read. Readers' (cupool stat's flush and dump, cupool pause). */
int stats_page_request(int pid, stats_request r, double timeout, stats_view *before,
                       stats_view *after);
/* The calling process's pid namespace (its inode): pages and group
 * segments are one namespace's, as pids are. */
unsigned long stats_pid_ns(void);
/* 1 if pid answered ticket of r, 0 if not yet, or as stats_page_read. */
int stats_page_answered(int pid, stats_request r, uint64_t ticket);
/* Lists the pids that have live pages for this user in this pid namespace,
 * up to max; removes stale pages (and pages left half made by processes
 * that died) when clean is true, counting them in *removed. Returns the
 * count. */
size_t stats_page_list(int *pids, size_t max, bool clean, size_t *removed);

#endif
