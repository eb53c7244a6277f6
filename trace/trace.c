/* SPDX-License-Identifier: Apache-2.0 */
/*
 * trace.c - the trace header, names, loading and writing (see trace.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "trace.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the trace format is little-endian; this host is not"
#endif

void trace_header_init(trace_header *h, int pid, const char *comm,
                       uint64_t start_unix_ns, trace_source src)
{
    memset(h, 0, sizeof(*h));
    memcpy(h->magic, TRACE_MAGIC, 8);
    h->version = TRACE_VERSION;
    h->header_size = TRACE_HEADER_SIZE;
    h->record_size = TRACE_RECORD_SIZE;
    h->pid = pid;
    h->start_unix_ns = start_unix_ns;
    if (comm)
        strncpy(h->comm, comm, sizeof(h->comm) - 1);
    h->source = (uint8_t)src;
}

int trace_header_check(const trace_header *h, uint64_t file_size, char *why,
                       size_t len)
{
    if (file_size < TRACE_HEADER_SIZE) {
        snprintf(why, len, "truncated header (%llu of %u bytes): not a "
                 "complete cupool trace", (unsigned long long)file_size,
                 TRACE_HEADER_SIZE);
        return -1;
    }
    if (memcmp(h->magic, TRACE_MAGIC, 8) != 0) {
        snprintf(why, len, "not a cupool trace (bad magic)");
        return -1;
    }
    if (h->version != TRACE_VERSION) {
        snprintf(why, len, "trace format version %u; this cupool reads "
                 "version %u", h->version, TRACE_VERSION);
        return -1;
    }
    if (h->header_size != TRACE_HEADER_SIZE || h->record_size != TRACE_RECORD_SIZE) {
        snprintf(why, len, "corrupted header: header size %u, record size %u "
                 "(expected %u and %u)", h->header_size, h->record_size,
                 TRACE_HEADER_SIZE, TRACE_RECORD_SIZE);
        return -1;
    }
    if (h->source > TRACE_SRC_TEXT || h->comm[sizeof(h->comm) - 1] != '\0') {
        snprintf(why, len, "corrupted header: bad source or name field");
        return -1;
    }
    return 0;
}

const char *trace_op_name(trace_op op)
{
    static const char *const names[TRACE_OPS] = {
        [TRACE_ALLOC] = "alloc", [TRACE_FREE] = "free", [TRACE_FENCE] = "fence",
        [TRACE_RESERVE] = "reserve", [TRACE_RELEASE] = "release",
        [TRACE_FLUSH] = "flush", [TRACE_OOM] = "oom"};
    return op > 0 && op < TRACE_OPS ? names[op] : "?";
}

const char *trace_result_name(trace_result r)
{
    switch (r) {
    case TRACE_R_OK: return "ok";
    case TRACE_R_NOMEM: return "device-out-of-memory";
    case TRACE_R_CAP: return "cap";
    case TRACE_R_FRAG: return "fragmentation";
    case TRACE_R_BADFREE: return "bad-free";
    case TRACE_R_DEFERRED: return "deferred";
    case TRACE_R_ERROR: return "error";
    }
    return "?";
}

/* ---- loading ------------------------------------------------------------- */

/* Stable merge sort by time; tmp holds n records. */
static void sort_by_time(trace_record *a, trace_record *tmp, size_t n)
{
    for (size_t w = 1; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = lo + w < n ? lo + w : n;
            size_t hi = lo + 2 * w < n ? lo + 2 * w : n;
            if (mid == hi || a[mid - 1].time <= a[mid].time) {
                memcpy(tmp + lo, a + lo, (hi - lo) * sizeof(*a));
                continue;
            }
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi)
                tmp[k++] = a[j].time < a[i].time ? a[j++] : a[i++];
            while (i < mid)
                tmp[k++] = a[i++];
            while (j < hi)
                tmp[k++] = a[j++];
        }
        memcpy(a, tmp, n * sizeof(*a));
    }
}

static bool sorted(const trace_record *a, size_t n)
{
    for (size_t i = 1; i < n; i++)
        if (a[i].time < a[i - 1].time)
            return false;
    return true;
}

int trace_read_all(const char *path, unsigned char **out, size_t *outlen, char *why,
                   size_t len)
{
    bool is_stdin = strcmp(path, "-") == 0;
    FILE *f = is_stdin ? stdin : fopen(path, "rb");
    if (!f) {
        snprintf(why, len, "cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    /* Read everything: works for pipes as well as files. */
    size_t cap = 1 << 20, got = 0;
    unsigned char *buf = malloc(cap);
    while (buf) {
        size_t r = fread(buf + got, 1, cap - got, f);
        got += r;
        if (got < cap)
            break;
        unsigned char *nb = cap > SIZE_MAX / 2 ? NULL : realloc(buf, cap * 2);
        if (!nb) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    bool read_err = ferror(f);
    if (!is_stdin)
        fclose(f);
    if (!buf) {
        snprintf(why, len, "%s: out of memory reading the trace", path);
        return -1;
    }
    if (read_err) {
        snprintf(why, len, "cannot read %s", path);
        free(buf);
        return -1;
    }
    *out = buf;
    *outlen = got;
    return 0;
}

int trace_parse(const char *path, unsigned char *buf, size_t got, trace *t, char *why,
                size_t len)
{
    memset(t, 0, sizeof(*t));
    if (got >= TRACE_HEADER_SIZE)
        memcpy(&t->hdr, buf, TRACE_HEADER_SIZE);
    char reason[200];
    if (trace_header_check(&t->hdr, got, reason, sizeof(reason))) {
        snprintf(why, len, "%s: %s", path, reason);
        free(buf);
        return -1;
    }
    size_t body = got - TRACE_HEADER_SIZE;
    size_t n = body / TRACE_RECORD_SIZE;
    t->partial_bytes = body % TRACE_RECORD_SIZE;
    t->rec = malloc((n ? n : 1) * sizeof(*t->rec));
    bool ok = t->rec != NULL;
    const unsigned char *p = buf + TRACE_HEADER_SIZE;
    for (size_t i = 0; ok && i < n; i++, p += TRACE_RECORD_SIZE) {
        trace_record r;
        memcpy(&r, p, sizeof(r));
        trace_op op = trace_op_of(&r);
        if (op < TRACE_ALLOC || op >= TRACE_OPS)
            t->bad_records++;
        else
            t->rec[t->n++] = r;
    }
    free(buf);
    if (ok && !sorted(t->rec, t->n)) {
        trace_record *tmp = malloc(t->n * sizeof(*tmp));
        ok = tmp != NULL;
        if (ok)
            sort_by_time(t->rec, tmp, t->n);
        free(tmp);
    }
    if (!ok) {
        trace_free(t);
        snprintf(why, len, "%s: out of memory loading %zu records", path, n);
        return -1;
    }
    return 0;
}

void trace_free(trace *t)
{
    free(t->rec);
    t->rec = NULL;
    t->n = 0;
}

/* ---- writing ------------------------------------------------------------- */

int trace_write_header(FILE *f, const trace_header *h)
{
    return fwrite(h, sizeof(*h), 1, f) == 1 ? 0 : -1;
}

int trace_write_record(FILE *f, uint64_t time, trace_op op, trace_result r,
                       unsigned dev, uint64_t addr, uint64_t size)
{
    trace_record rec = {time, addr, trace_word(op, r, dev, size)};
    return fwrite(&rec, sizeof(rec), 1, f) == 1 ? 0 : -1;
}
