/* SPDX-License-Identifier: Apache-2.0 */
/*
 * trace.h - cupool's allocation trace: the file format, and its reader.
 *
 * A trace is a 64-byte header followed by 24-byte records, little-endian,
 * appended as they are drained from per-pool buffers. Records of one pool
 * are in the order its lock served them, with times that never decrease;
 * records of different pools interleave in chunks, so a reader sorts by
 * time (trace_parse does, stably, which keeps each pool's order). Times may
 * be early by up to a millisecond (shim/base/recorder.h). A trace cut short
 * (a crash, a kill -9) ends in at most one partial record, which readers
 * ignore and report.
 *
 *   header   magic "CUPOOLTR", u32 version (1), u32 header size (64),
 *            u32 record size (24), i32 pid, u64 start (Unix ns),
 *            char comm[16], u8 source, 15 bytes zero
 *   record   u64 time (ns since start), u64 address,
 *            u64 size:48 | op:4 | result:4 | device:8
 *
 * The writer lives in the shim (shim/base/recorder.c); `cupool-trace encode` and
 * the tests write through trace_write_*.
 */
#ifndef CUPOOL_STATS_TRACE_H
#define CUPOOL_STATS_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define TRACE_MAGIC "CUPOOLTR"
#define TRACE_VERSION 1u
#define TRACE_HEADER_SIZE 64u
#define TRACE_RECORD_SIZE 24u
#define TRACE_SIZE_MAX ((UINT64_C(1) << 48) - 1)

/* Operations. addr and size mean, for each: */
typedef enum trace_op {
    TRACE_ALLOC = 1,   /* block address, bytes asked for */
    TRACE_FREE = 2,    /* block address, 0 */
    TRACE_FENCE = 3,   /* 0, 0; result: ok, or TRACE_R_DEFERRED / ERROR */
    TRACE_RESERVE = 4, /* segment base, segment bytes (from the driver) */
    TRACE_RELEASE = 5, /* segment base, segment bytes (to the driver) */
    TRACE_FLUSH = 6,   /* 0, bytes returned to the driver */
    TRACE_OOM = 7,     /* 0, bytes asked for: an allocation that failed */
    TRACE_OPS
} trace_op;

/* Results (4 bits). */
typedef enum trace_result {
    TRACE_R_OK = 0,
    TRACE_R_NOMEM = 1,     /* the device had no memory */
    TRACE_R_CAP = 2,       /* the reserved-memory cap */
    TRACE_R_FRAG = 3,      /* memory was free in total, no block fitted */
    TRACE_R_BADFREE = 4,   /* a free of an interior or freed block */
    TRACE_R_DEFERRED = 5,  /* fence: not possible now (graph capture) */
    TRACE_R_ERROR = 6      /* anything else */
} trace_result;

/* Where the events came from. */
typedef enum trace_source {
    TRACE_SRC_SHIM = 0,    /* recorded by libcupool.so (CUPOOL_TRACE) */
    TRACE_SRC_TORCH = 1,   /* converted from a PyTorch memory snapshot */
    TRACE_SRC_TEXT = 2     /* encoded from text (cupool-trace encode) */
} trace_source;

typedef struct trace_header {
    char magic[8];
    uint32_t version;
    uint32_t header_size;
    uint32_t record_size;
    int32_t pid;
    uint64_t start_unix_ns;
    char comm[16];
    uint8_t source;
    uint8_t zero[15];
} trace_header;

/* One record as stored. */
typedef struct trace_record {
    uint64_t time;
    uint64_t addr;
    uint64_t word;
} trace_record;

_Static_assert(sizeof(trace_header) == TRACE_HEADER_SIZE, "header layout");
_Static_assert(sizeof(trace_record) == TRACE_RECORD_SIZE, "record layout");

static inline uint64_t trace_word(trace_op op, trace_result r, unsigned dev,
                                  uint64_t size)
{
    if (size > TRACE_SIZE_MAX)
        size = TRACE_SIZE_MAX;
    return size | (uint64_t)(op & 15) << 48 | (uint64_t)(r & 15) << 52 |
           (uint64_t)(dev & 255) << 56;
}
static inline uint64_t trace_size(const trace_record *r) { return r->word & TRACE_SIZE_MAX; }
static inline trace_op trace_op_of(const trace_record *r) { return (trace_op)(r->word >> 48 & 15); }
static inline trace_result trace_result_of(const trace_record *r) { return (trace_result)(r->word >> 52 & 15); }
static inline unsigned trace_device(const trace_record *r) { return (unsigned)(r->word >> 56); }

/* Fills a version-1 header. */
void trace_header_init(trace_header *h, int pid, const char *comm,
                       uint64_t start_unix_ns, trace_source src);

/* Checks a header read from a file of file_size bytes. Returns 0, or -1
 * with a one-line reason in why ("not a cupool trace", ...). */
int trace_header_check(const trace_header *h, uint64_t file_size, char *why,
                       size_t len);

const char *trace_op_name(trace_op op);
const char *trace_result_name(trace_result r);

/* A whole trace in memory, sorted by time (stable). */
typedef struct trace {
    trace_header hdr;
    trace_record *rec;
    size_t n;
    size_t partial_bytes;  /* bytes of a cut-off last record, ignored */
    size_t bad_records;    /* records with an unknown op, skipped */
} trace;

/* How a trace is loaded (trace_load_any, trace/trace_gz.h, which also
 * reads gzip'd ones). trace_read_all reads a whole file ("-": standard
 * input) into *buf (malloc'd) and *got; trace_parse loads the trace held
 * in buf (which it frees), naming it path in messages: 0, or -1 with a
 * one-line reason in why (cannot open, short or bad header, out of
 * memory). */
int trace_read_all(const char *path, unsigned char **buf, size_t *got, char *why,
                   size_t len);
int trace_parse(const char *path, unsigned char *buf, size_t got, trace *t, char *why,
                size_t len);
void trace_free(trace *t);

/* Writing, for encode and the tests: header then records. 0 or -1 (errno
 * set). */
int trace_write_header(FILE *f, const trace_header *h);
int trace_write_record(FILE *f, uint64_t time, trace_op op, trace_result r,
                       unsigned dev, uint64_t addr, uint64_t size);

#endif
