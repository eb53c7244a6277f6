#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""test_extension_points.py BUILD - what was added through the tables at
cupool's extension points (docs/DESIGN.md, "Adding a statistic or a
framework"), each run for real: the scenario programs (or a Python
program) preloaded with BUILD/libcupool.so over the simulated runtime, the
figures read from the statistics the process prints at exit or from
`cupool stat --json` and `cupool flush`.

  cap_refusals   a device counter of STATS_DEVICE_COUNTS (stats/stats.h),
                 counted in shim/device/cap.c

Prints "ok NAME" or "FAIL NAME: why", one line each; exit 1 if any failed.
Every process gets its own HOME, TMPDIR and page directory, removed at the
end."""
import json
import os
import subprocess
import sys
import tempfile

build = sys.argv[1] if len(sys.argv) > 1 else "build"
lib = os.path.abspath(os.path.join(build, "libcupool.so"))
failed = 0


def report(name, cond, detail=""):
    global failed
    print(f"{'ok  ' if cond else 'FAIL'} {name}{': ' + str(detail)[-600:] if not cond else ''}",
          flush=True)
    failed += not cond


def clean_env(tmp, **extra):
    """The environment of a process under cupool: nothing of the caller's
    cupool options, the scenarios' segment sizes (test_shim's), its own
    HOME, TMPDIR and page directory under tmp."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("CUPOOL_") and k not in ("LD_PRELOAD",
                                                         "PYTORCH_NO_CUDA_MEMORY_CACHING")}
    env.update(CUPOOL_SMALL_SEGMENT="2M", CUPOOL_MID_MAX="0", LD_PRELOAD=lib,
               HOME=tmp, TMPDIR=tmp, CUPOOL_PAGE_DIR=os.path.join(tmp, "pages"))
    env.update(extra)
    return env


def exit_stats(tmp, program, scenario, **extra):
    """Runs BUILD/rt/PROGRAM SCENARIO to its end under cupool; its exit
    status and the statistics it printed at exit (JSON), or None."""
    env = clean_env(tmp, CUPOOL_STATS_AT_EXIT="1", CUPOOL_STATS_FORMAT="json", **extra)
    p = subprocess.run([os.path.join(build, "rt", program), scenario], env=env,
                       capture_output=True, text=True, timeout=120, errors="replace")
    for line in p.stderr.splitlines():
        if line.startswith("{\"cupool\":"):
            return p.returncode, json.loads(line), p.stderr
    return p.returncode, None, p.stderr


def device0(tmp, program, scenario, field, **extra):
    """field of device 0 in PROGRAM SCENARIO's statistics at exit, or why
    there is none."""
    st, stats, err = exit_stats(tmp, program, scenario, **extra)
    if st != 0 or not stats or not stats["devices"]:
        return f"exit {st}: {err}"
    return stats["devices"][0][field]


def test_cap_refusals(tmp):
    """Each request the cap refuses counts once, whether a retry served it
    or not: the fifth 3 MiB block under a 16 MiB cap (four segments of 4
    MiB fill it); a thread's block while two shards' segments hold live
    blocks (refused), then again once one of them is idle (its shard's
    segment returned, then served); and calls passed on to the driver (a
    10 MiB cuMemCreate, a 6 MiB cuMemAllocAsync served once the pool's 8
    MiB cache went back, a 4 MiB cuMemAlloc, a second 2 MiB cuMemCreate, a 4
    MiB cuMemAllocAsync served once the pool's cache went back, and the
    9th 1 MiB cuMemAlloc). Without a cap, none."""
    got = device0(tmp, "rt_prog", "cap", "cap_refusals", CUPOOL_MAX_RESERVED="16M")
    report("cap_refusals: the block the cap refused", got == 1, got)
    got = device0(tmp, "rt_prog", "shards_cap", "cap_refusals", CUPOOL_MAX_RESERVED="4M")
    report("cap_refusals: refused, then served after the device's idle segments went back",
           got == 2, got)
    got = device0(tmp, "drv_prog", "cap", "cap_refusals", CUPOOL_MAX_RESERVED="8M")
    report("cap_refusals: calls passed on and pool allocations through the driver",
           got == 6, got)
    got = device0(tmp, "rt_prog", "shards", "cap_refusals")
    report("cap_refusals: none without a cap", got == 0, got)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory(prefix="cupool-extension-") as tmp:
        test_cap_refusals(tmp)
    sys.exit(1 if failed else 0)
