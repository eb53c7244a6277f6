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
  paddle         PaddlePaddle's cache in a flush: its row of
                 STATS_FRAMEWORKS and of shim/process/framework.c's table
                 (the stand-in of test/fw/paddle, with test/fw_paddle_prog.py)

Prints "ok NAME" or "FAIL NAME: why", one line each; exit 1 if any failed.
Every process gets its own HOME, TMPDIR and page directory, removed at the
end."""
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time

build = sys.argv[1] if len(sys.argv) > 1 else "build"
lib = os.path.abspath(os.path.join(build, "libcupool.so"))
reader = os.path.abspath(os.path.join(build, "cupool-stat"))
here = os.path.dirname(os.path.abspath(__file__))
MIB = 1 << 20
runs = itertools.count()
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


def fw_start(tmp, mode, **extra):
    """test/fw_paddle_prog.py MODE under cupool (the plain library: a
    sanitizer runtime cannot be preloaded into python3), once its memory is
    in place (it touched $READY); None if it never was."""
    ready = os.path.join(tmp, f"ready-{mode}-{next(runs)}")
    sim = os.path.realpath(os.path.join(build, "sim", "libcudart.so.13"))
    env = clean_env(tmp, SIM_LIB=sim, READY=ready, **extra)
    p = subprocess.Popen([sys.executable, os.path.join(here, "fw_paddle_prog.py"), mode],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while not os.path.exists(ready) and p.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    if os.path.exists(ready):
        return p
    p.kill()
    out, err = p.communicate()
    report(f"fw_paddle_prog.py {mode} ready", False, out + err)
    return None


def fw_end(p):
    """Ends the program (SIGTERM); its exit status, stdout and stderr."""
    p.terminate()
    out, err = p.communicate(timeout=60)
    return p.returncode, out, err


def cupool(tmp, *args):
    """cupool-stat ARGS on the test's pages: its stdout and stderr."""
    env = {"PATH": os.environ.get("PATH", ""), "HOME": tmp, "TMPDIR": tmp,
           "CUPOOL_PAGE_DIR": os.path.join(tmp, "pages")}
    p = subprocess.run([reader, *args], env=env, capture_output=True, text=True, timeout=60)
    return p.stdout + p.stderr


def process_stats(tmp, pid):
    """pid's process counters, as cupool stat --json prints them."""
    out = cupool(tmp, "stat", "--json", str(pid))
    try:
        return json.loads(out.splitlines()[0])["process"]
    except (ValueError, IndexError, KeyError):
        return {"unreadable": out}


def test_paddle_flush(tmp):
    """A flush releases PaddlePaddle's cache from cupool's own thread (never
    the program's main thread), then returns it to the driver: cupool flush
    names Paddle's part, framework_paddle counts it, and the program keeps
    only its live 1 MiB (in a 2 MiB segment)."""
    p = fw_start(tmp, "paddle")
    if not p:
        return
    out = cupool(tmp, "flush", str(p.pid))
    report("paddle: cupool flush returns its cache and names it",
           "returned 16.00 MiB" in out and
           "(paddle.device.cuda.empty_cache 12.00 MiB), 4.00 MiB from cupool's own" in out, out)
    st = process_stats(tmp, p.pid)
    report("paddle: framework_paddle counts what it gave back",
           (st.get("framework_paddle"), st.get("framework_torch"), st.get("framework_flushes"))
           == (12 * MIB, 0, 1), st)
    status, out, err = fw_end(p)
    report("paddle: released once, not in the main thread, the live block kept",
           status == 0 and "paddle empty_cache calls: 1, in the main thread: 0, its cache "
           "keeps 0 blocks\ndriver holds: 2097152" in out, out + err[-2000:])


def test_frameworks_together(tmp, raises):
    """PyTorch, Paddle and JAX in one program: each framework released in
    turn, JAX named as one whose memory cannot be given back. With Paddle's
    empty_cache raising (raises), PyTorch's release before it and the look
    for JAX after it still happen, the program goes on undisturbed, and
    Paddle keeps its cache."""
    name = "frameworks together" + (", paddle raising" if raises else "")
    p = fw_start(tmp, "all", **({"FAKE_PADDLE_RAISES": "1"} if raises else {}))
    if not p:
        return
    out = cupool(tmp, "flush", str(p.pid))
    want = ("returned 24.00 MiB", "(torch.cuda.empty_cache 18.00 MiB), 6.00 MiB from cupool's") \
        if raises else ("returned 40.00 MiB", "(torch.cuda.empty_cache 18.00 MiB, "
                        "paddle.device.cuda.empty_cache 12.00 MiB), 10.00 MiB from cupool's")
    report(f"{name}: cupool flush names each part",
           all(w in out for w in want) and
           "JAX holds its own memory, which cannot be given back from outside" in out, out)
    st = process_stats(tmp, p.pid)
    got = tuple(st.get(k) for k in ("framework_torch", "framework_paddle", "framework_unable"))
    report(f"{name}: the counters", got == (18 * MIB, 0 if raises else 12 * MIB, 1), st)
    status, out, err = fw_end(p)
    said = "(a framework call raised; the program was not disturbed)" in err
    report(f"{name}: the program's end and log",
           status == 0 and said == raises and "torch empty_cache calls: 1" in out and
           f"paddle empty_cache calls: 1, in the main thread: 0, its cache keeps "
           f"{4 if raises else 0} blocks" in out, out + err[-2000:])


if __name__ == "__main__":
    with tempfile.TemporaryDirectory(prefix="cupool-extension-") as tmp:
        os.mkdir(os.path.join(tmp, "pages"), 0o700)
        test_cap_refusals(tmp)
        test_paddle_flush(tmp)
        test_frameworks_together(tmp, False)
        test_frameworks_together(tmp, True)
    sys.exit(1 if failed else 0)
