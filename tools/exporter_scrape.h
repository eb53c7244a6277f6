/* SPDX-License-Identifier: Apache-2.0 */
/*
 * exporter_scrape.h - cupool exporter's scrape (exporter_scrape.c), apart from its
 * HTTP server (exporter.c).
 */
#ifndef CUPOOL_TOOLS_EXPORTER_SCRAPE_H
#define CUPOOL_TOOLS_EXPORTER_SCRAPE_H

#include <stddef.h>

typedef struct exporter_opts {
    const char *const *dirs;  /* page directories, ndirs of them (0: the defaults) */
    size_t ndirs;
    int devices;              /* the node's GPUs: a page's entries for devices at or
                                 past it are dropped (and counted) */
    size_t max_answer;        /* bytes an answer may reach: processes past it are
                                 left out (and counted, with a note) */
} exporter_opts;

/* One scrape of the node in Prometheus's text format: *text (malloc'd, the
 * caller frees it) and *len. 0, or -ENOMEM (*text NULL). Not thread-safe:
 * the exporter's counters across scrapes live here. */
int exporter_scrape(const exporter_opts *o, char **text, size_t *len);

#endif
