#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""test_docs_examples.py BUILD - the examples of docs/GUIDE.md that need no
GPU are run and compared with what the guide shows: each example's output
lines, numbers masked (pids, times, sizes differ from run to run and
machine to machine; words, units and the number of lines must not), must
appear in order in what the command prints now. Prints "ok NAME" or
"FAIL NAME: why", one line each."""
import os
import re
import subprocess
import sys
import tempfile
import time

build = sys.argv[1] if len(sys.argv) > 1 else "build"
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.chdir(root)
guide = open("docs/GUIDE.md").read()
failed = 0


def mask(line):
    return re.sub(r"\s+", " ", re.sub(r"\d+(\.\d+)?", "#", line)).strip()


def blocks():
    """The guide's fenced code blocks, each a list of lines."""
    out, cur = [], None
    for line in guide.split("\n"):
        if line.startswith("```"):
            if cur is None:
                cur = []
            else:
                out.append(cur)
                cur = None
        elif cur is not None:
            cur.append(line)
    return out


def shown(first):
    """The lines of the example block whose first line starts with first."""
    for lines in blocks():
        if lines and lines[0].startswith(first):
            return lines
    return None


def in_order(want, got):
    """Whether every masked line of want appears, in order, in got."""
    it = iter(mask(g) for g in got)
    return all(any(mask(w) == g for g in it) for w in want if w.strip())


def report(name, ok, why=""):
    global failed
    failed += not ok
    print(f"ok   {name}" if ok else f"FAIL {name}: {why}")


def run(cmd, env=None):
    p = subprocess.run(cmd, shell=True, capture_output=True, text=True,
                       env=dict(os.environ, **(env or {})), timeout=60)
    return (p.stdout + p.stderr).split("\n")


def check(name, first, got):
    want = shown(first)
    if want is None:
        return report(name, False, f"no example starting {first!r} in docs/GUIDE.md")
    out = [w for w in want[1:] if not w.startswith("$ ")]
    report(name, in_order(out, got), "\n".join(got[:20]))


def example_oom():
    cmd = ("CUPOOL_SMALL_SEGMENT=2M CUPOOL_MAX_RESERVED=8M "
           f"LD_PRELOAD={build}/libcupool.so {build}/rt/rt_prog frag")
    check("the out-of-memory example", "$ CUPOOL_SMALL_SEGMENT=2M CUPOOL_MAX_RESERVED=8M",
          run(cmd))


def example_replay():
    first = "$ cupool replay test/data/transformer.trace.gz"
    check("the replay example", first,
          run(first[2:].replace("cupool", "scripts/cupool", 1)))


def example_top_and_flush():
    with tempfile.TemporaryDirectory() as pg:
        env = dict(CUPOOL_PAGE_DIR=pg, CUPOOL_SMALL_SEGMENT="2M",
                   LD_PRELOAD=os.path.abspath(f"{build}/libcupool.so"))
        procs = [subprocess.Popen([f"{build}/rt/rt_prog", "serve"],
                                  env=dict(os.environ, READY=f"{pg}/r{i}", **env),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                 for i in (1, 2)]
        for _ in range(500):
            if all(os.path.exists(f"{pg}/r{i}") for i in (1, 2)):
                break
            time.sleep(0.01)
        time.sleep(0.3)  # both pages published
        top = run("scripts/cupool top --count 1", {"CUPOOL_PAGE_DIR": pg})
        pid = procs[0].pid
        flush = run(f"scripts/cupool flush {pid}", {"CUPOOL_PAGE_DIR": pg})
        for p in procs:
            p.terminate()
            p.wait()
    check("the top and flush example", "$ scripts/cupool top --count 1", top + flush)


if __name__ == "__main__":
    example_oom()
    example_replay()
    example_top_and_flush()
    sys.exit(1 if failed else 0)
