/* SPDX-License-Identifier: Apache-2.0 */
/*
 * move.c - cupool pause's own move of a process's memory (the shim's
 * park.h, through the process's page): out before the driver's
 * checkpoint, which then moves only what cupool does not serve (the
 * context, memory passed on), and back after the driver's restore. Where
 * the process refuses (no VMM segment, CUPTI not its to use, a capture
 * under way, a thread inside a long CUDA call), the driver moves
 * everything, as before, and the reason is said.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "clock.h"
#include "move.h"
#include "say.h"
#include "stats.h"

static double gib(uint64_t b) { return (double)b / 1073741824.0; }

/* The line saying what a park or an unpark did. */
static void said_moved(int pid, const stats_park *p, bool out, double took)
{
    double copy = p->copy_us / 1e6;
    char pin[64] = "", left[64] = "", b[32];
    if (out)
        snprintf(left, sizeof(left), "; the device holds %s now",
                 stats_fmt_bytes(p->left, b, sizeof(b)));
    if (out && p->pin_us)
        snprintf(pin, sizeof(pin), ", pinning host memory %.3f s over the threads",
                 p->pin_us / 1e6);
    pause_say("%s %d's memory %s: %.2f GiB in %.3f s (%.2f GiB/s, %u threads%s); in all "
              "%.3f s (its calls stopped %.3f s, its work waited for %.3f s, %s %.3f s)%s",
              out ? "moved" : "brought back", pid, out ? "to host memory" : "to the device",
              gib(p->moved), copy, copy > 0 ? gib(p->moved) / copy : 0.0, p->streams, pin,
              took, p->gate_us / 1e6, p->sync_us / 1e6,
              out ? "given back beside the copies" : "mapped beside the copies", p->map_us / 1e6,
              left);
}

int pause_move_out(int pid, double timeout, stats_view *v)
{
    stats_view before;
    double t0 = clock_mono_s();
    int err = stats_page_request(pid, STATS_REQ_PARK, timeout, &before, v);
    if (err == -ETIMEDOUT) {
        pause_say("process %d did not answer cupool's move within %.0f s: the driver "
                  "moves everything", pid, timeout);
        return 1;
    }
    if (err) {
        pause_say("process %d could not be asked to move its memory (its page: %s): the "
                  "driver moves everything", pid, strerror(-err));
        return 1;
    }
    if (v->park.state != STATS_PARK_PARKED) {
        pause_say("cupool cannot move process %d's memory itself: %s; the driver moves "
                  "everything", pid, v->park.error ? v->park.why : "it did not say why");
        return 1;
    }
    said_moved(pid, &v->park, true, clock_mono_s() - t0);
    return 0;
}

int pause_move_back(int pid, double timeout)
{
    stats_view before, after;
    double t0 = clock_mono_s();
    int err = stats_page_request(pid, STATS_REQ_UNPARK, timeout, &before, &after);
    if (err) {
        pause_say("process %d %s: it stays paused (cupool resume tries again)", pid,
                  err == -ETIMEDOUT ? "did not bring its memory back in time"
                                    : "could not be asked to bring its memory back");
        return 1;
    }
    if (after.park.state == STATS_PARK_PARKED) {
        pause_say("process %d could not bring its memory back: %s", pid,
                  after.park.why[0] ? after.park.why : "it did not say why");
        return 1;
    }
    said_moved(pid, &after.park, false, clock_mono_s() - t0);
    return 0;
}
