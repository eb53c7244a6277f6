/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plot.c - see plot.h.
 *
 * Each series is drawn as one polyline with two points per pixel column
 * (the column's extremes, in the order that joins its neighbours), so a
 * spike one event wide still shows and the file stays small whatever the
 * trace's length.
 */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plot.h"
#include "stats.h"

enum { W = 1000, H = 560, ML = 84, MR = 24, MT = 78, MB = 56 };
enum { PW = W - ML - MR, PH = H - MT - MB };

static const char *const C_RESERVED = "#d9480f";
static const char *const C_ALLOCATED = "#1c7ed6";
static const char *const C_LARGEST = "#2b8a3e";
static const char *const C_RECORDED = "#868e96";
static const char *const C_OOM = "#c92a2a";
static const char *const C_FLUSH = "#7048e8";

static void xml_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        default:
            if ((unsigned char)*s >= 0x20 || *s == '\t')
                fputc(*s, f);
        }
    }
}

/* A round step giving about n intervals up to max. */
static double nice_step(double max, int n)
{
    if (max <= 0)
        return 1;
    double raw = max / n, mag = pow(10, floor(log10(raw)));
    double f = raw / mag;
    return mag * (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10);
}

typedef struct axis {
    double max;      /* in data units */
    double step;
    double scale;    /* data units per display unit */
    const char *unit;
} axis;

static axis bytes_axis(uint64_t max)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    axis a = {.scale = 1, .unit = units[0]};
    double m = max ? (double)max : 1;
    for (int i = 1; i < 5 && m / a.scale >= 1024; i++) {
        a.scale *= 1024;
        a.unit = units[i];
    }
    a.step = nice_step(m / a.scale * 1.05, 6) * a.scale;
    a.max = ceil(m * 1.05 / a.step) * a.step;
    return a;
}

static axis time_axis(uint64_t span_ns)
{
    axis a = {.scale = 1e9, .unit = "s"};
    if (span_ns < 1000000) {
        a.scale = 1e3;
        a.unit = "\xc2\xb5s";
    } else if (span_ns < 1000000000) {
        a.scale = 1e6;
        a.unit = "ms";
    }
    double m = span_ns ? (double)span_ns : 1;
    a.step = nice_step(m / a.scale, 8) * a.scale;
    a.max = m;
    return a;
}

static double px_x(const axis *x, double v) { return ML + PW * (v / x->max); }
static double px_y(const axis *y, double v) { return MT + PH - PH * (v / y->max); }

/* Value of series k (0 reserved, 1 allocated, 2 largest free, 3 recorded
 * reserved) in sample s. */
static uint64_t series(const replay_sample *s, int k)
{
    switch (k) {
    case 0: return s->reserved;
    case 1: return s->allocated;
    case 2: return s->largest_free;
    default: return s->recorded_reserved;
    }
}

static void polyline(FILE *f, const replay_result *r, int k, const axis *x,
                     const axis *y, bool by_index, const char *color,
                     const char *extra)
{
    fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.6\" "
            "stroke-linejoin=\"round\"%s points=\"", color, extra);
    double last = 0;
    uint64_t i = 0;
    for (int col = 0; col < PW && i < r->nsamples; col++) {
        double hi_edge = x->max * (col + 1) / PW;
        uint64_t lo = UINT64_MAX, hi = 0;
        for (; i < r->nsamples; i++) {
            double t = by_index ? (double)i : (double)r->sample[i].time;
            if (t > hi_edge)
                break;
            uint64_t v = series(&r->sample[i], k);
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
        }
        if (lo == UINT64_MAX) { /* no event here: the state holds */
            if (i == 0)
                continue;
            lo = hi = series(&r->sample[i - 1], k);
        }
        double cx = ML + col + 0.5;
        double a = px_y(y, (double)lo), b = px_y(y, (double)hi);
        /* Join the previous column at the nearer extreme. */
        if (fabs(last - a) < fabs(last - b))
            fprintf(f, "%.1f,%.1f %.1f,%.1f ", cx, a, cx, b), last = b;
        else
            fprintf(f, "%.1f,%.1f %.1f,%.1f ", cx, b, cx, a), last = a;
    }
    fputs("\"/>\n", f);
}

/* A vertical line at x; its label above the plot unless label is NULL
 * (a series of markers is labelled once). */
static void marker(FILE *f, double x, const char *color, const char *label,
                   bool dashed, int row)
{
    fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"%s\" "
            "stroke-width=\"1.2\"%s/>\n", x, MT, x, MT + PH, color,
            dashed ? " stroke-dasharray=\"5,3\"" : "");
    if (label)
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" fill=\"%s\" font-size=\"11\" "
                "text-anchor=\"start\">%s</text>\n", x, MT - 4 - 12 * row, color, label);
}

static void legend(FILE *f, int i, const char *color, const char *label,
                   bool dashed)
{
    int x = ML + 12, y = MT + 16 + 18 * i;
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" "
            "stroke-width=\"2.5\"%s/>\n", x, y - 4, x + 22, y - 4, color,
            dashed ? " stroke-dasharray=\"5,3\"" : "");
    fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"12\">%s</text>\n", x + 30, y, label);
}

/* The document's start, the title and the figures under it. */
static void svg_head(FILE *f, const replay_opts *o, const replay_result *r,
                     const char *title)
{
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\" font-family=\"DejaVu Sans, Helvetica, Arial, "
            "sans-serif\">\n<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n",
            W, H, W, H, W, H);
    fputs("<text x=\"16\" y=\"24\" font-size=\"16\" font-weight=\"bold\">", f);
    xml_text(f, title);
    fputs("</text>\n", f);
    char pr[32], pa[32], rp[32];
    fprintf(f, "<text x=\"16\" y=\"44\" font-size=\"12\" fill=\"#495057\">policy %s: "
            "peak reserved %s, peak allocated %s, fragmentation at peak %.0f%%, "
            "mean %.0f%%", o->policy->name,
            stats_fmt_bytes(r->peak_reserved, pr, sizeof(pr)),
            stats_fmt_bytes(r->peak_allocated, pa, sizeof(pa)),
            100 * r->frag_at_peak, 100 * r->frag_mean);
    if (r->recorded_peak_reserved)
        fprintf(f, "; recorded peak reserved %s",
                stats_fmt_bytes(r->recorded_peak_reserved, rp, sizeof(rp)));
    fputs("</text>\n", f);
}

/* The grid, the axes with their labels, and the cap if there is one. */
static void svg_grid(FILE *f, const replay_opts *o, const axis *xa, const axis *ya,
                     bool by_index)
{
    const axis x = *xa, y = *ya;
    /* Grid and axes. */
    for (double v = 0; v <= y.max + y.step / 2; v += y.step) {
        double py = px_y(&y, v);
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#e9ecef\"/>\n"
                "<text x=\"%d\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">%g %s</text>\n",
                ML, py, ML + PW, py, ML - 6, py + 4, v / y.scale, y.unit);
    }
    for (double v = 0; v <= x.max * 1.0001; v += x.step) {
        double px = px_x(&x, v);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#f1f3f5\"/>\n"
                "<text x=\"%.1f\" y=\"%d\" font-size=\"11\" text-anchor=\"middle\">%g</text>\n",
                px, MT, px, MT + PH, px, MT + PH + 16, v / x.scale);
    }
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" "
            "stroke=\"#495057\"/>\n", ML, MT, PW, PH);
    fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"12\" text-anchor=\"middle\">%s</text>\n",
            ML + PW / 2, H - 14, by_index ? "allocation events (in order)"
            : !strcmp(x.unit, "s") ? "time (s)" : !strcmp(x.unit, "ms") ? "time (ms)"
                                                                    : "time (\xc2\xb5s)");
    /* The cap, if any, with its value. */
    char cap[32];
    if (o->max_reserved) {
        double py = px_y(&y, (double)o->max_reserved);
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"%s\" "
                "stroke-dasharray=\"2,3\"/>\n<text x=\"%d\" y=\"%.1f\" font-size=\"11\" "
                "text-anchor=\"end\" fill=\"%s\">cap %s</text>\n", ML, py, ML + PW, py,
                C_OOM, ML + PW - 4, py - 4, C_OOM,
                stats_fmt_bytes(o->max_reserved, cap, sizeof(cap)));
    }
}

/* Events: recorded out-of-memory and flushes, and the replay's first
 * out-of-memory. Markers closer than 3 px are drawn once. */
static void svg_events(FILE *f, const trace *t, const replay_opts *o,
                       const replay_result *r, const axis *xa, bool by_index)
{
    const axis x = *xa;
    uint64_t start = 0, idx = 0;
    bool started = false;
    double last_oom = -10, last_flush = -10;
    uint64_t nooms = 0, nflushes = 0;
    char label[64];
    for (size_t i = 0; i < t->n; i++) {
        const trace_record *e = &t->rec[i];
        if (trace_device(e) != o->device)
            continue;
        if (!started) {
            start = e->time;
            started = true;
        }
        double v = by_index ? (double)idx : (double)(e->time - start);
        idx++;
        trace_op op = trace_op_of(e);
        if (op == TRACE_OOM && px_x(&x, v) - last_oom >= 3) {
            last_oom = px_x(&x, v);
            snprintf(label, sizeof(label), "%" PRIu64 " OOM (recorded)", r->recorded_ooms);
            marker(f, last_oom, C_OOM, nooms++ ? NULL : label, false, 0);
        } else if (op == TRACE_FLUSH && px_x(&x, v) - last_flush >= 3) {
            last_flush = px_x(&x, v);
            snprintf(label, sizeof(label), "%" PRIu64 " flush%s", r->recorded_flushes,
                     r->recorded_flushes == 1 ? "" : "es");
            marker(f, last_flush, C_FLUSH, nflushes++ ? NULL : label, true, 1);
        }
    }
    if (r->ooms) {
        double v = by_index ? (double)r->first_oom.index : (double)r->first_oom.time;
        char sz[32];
        snprintf(label, sizeof(label), "OOM in replay: %s (%s)",
                 stats_fmt_bytes(r->first_oom.size, sz, sizeof(sz)),
                 r->first_oom.fragmentation ? "fragmentation" : "no memory");
        marker(f, px_x(&x, v), C_OOM, label, false, 2);
    }
}

int plot_svg(FILE *f, const trace *t, const replay_opts *o,
             const replay_result *r, const char *title, bool by_event)
{
    uint64_t span = r->nsamples ? r->sample[r->nsamples - 1].time : 0;
    bool by_index = by_event || span == 0;
    axis x = by_index ? (axis){.max = r->nsamples > 1 ? (double)r->nsamples - 1 : 1,
                               .step = nice_step(r->nsamples ? (double)r->nsamples : 1, 8),
                               .scale = 1, .unit = "events"}
                      : time_axis(span);
    uint64_t ymax = r->peak_reserved > r->recorded_peak_reserved ? r->peak_reserved
                                                                 : r->recorded_peak_reserved;
    if (o->max_reserved && o->max_reserved > ymax)
        ymax = o->max_reserved;
    axis y = bytes_axis(ymax);

    svg_head(f, o, r, title);
    svg_grid(f, o, &x, &y, by_index);

    /* Series, then their legend on a background of its own over them. */
    bool recorded = r->recorded_peak_reserved != 0;
    if (recorded)
        polyline(f, r, 3, &x, &y, by_index, C_RECORDED, " stroke-dasharray=\"6,4\"");
    polyline(f, r, 0, &x, &y, by_index, C_RESERVED, "");
    polyline(f, r, 1, &x, &y, by_index, C_ALLOCATED, "");
    polyline(f, r, 2, &x, &y, by_index, C_LARGEST, "");
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"190\" height=\"%d\" fill=\"#ffffff\" "
            "fill-opacity=\"0.9\" stroke=\"#dee2e6\"/>\n", ML + 4, MT + 2,
            18 * (3 + recorded) + 8);
    int nl = 0;
    if (recorded)
        legend(f, nl++, C_RECORDED, "reserved, as recorded", true);
    legend(f, nl++, C_RESERVED, "reserved (replayed)", false);
    legend(f, nl++, C_ALLOCATED, "allocated", false);
    legend(f, nl++, C_LARGEST, "largest free block", false);

    svg_events(f, t, o, r, &x, by_index);
    fputs("</svg>\n", f);
    return ferror(f) ? -1 : 0;
}
