#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""test_exporter.py BUILD - `cupool exporter` (BUILD/cupool-exporter) over
programs under cupool on the simulated runtime, scraped by a real
Prometheus server (Debian's prometheus binary, which make test takes out
of its package into BUILD/tools without installing it: scripts/get-promtool)
started on 127.0.0.1 and stopped by this test; the alert rules of deploy/
through `promtool test rules`; the recipes of deploy/ parsed, every
CUPOOL_* name in them a real option.

Prints "ok NAME", "FAIL NAME: why" or "skip NAME: why", one line each."""
import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

build = sys.argv[1] if len(sys.argv) > 1 else "build"
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
lib = os.path.abspath(os.path.join(build, "libcupool.so"))
prog = os.path.abspath(os.path.join(build, "rt", "rt_prog"))
exporter = os.path.abspath(os.path.join("build", "cupool-exporter"))  # not a sanitizer build
options = os.path.abspath(os.path.join("build", "cupool-options"))
sim = os.path.abspath(os.path.join("build", "sim"))
tools = os.path.abspath(os.path.join("build", "tools"))
failed = 0


def report(name, cond, detail=""):
    global failed
    print(f"{'ok  ' if cond else 'FAIL'} {name}{': ' + str(detail)[-600:] if not cond else ''}",
          flush=True)
    failed += not cond


def skip(name, why):
    print(f"skip {name}: {why}", flush=True)


def tool(name):
    path = os.path.join(tools, name)
    return path if os.access(path, os.X_OK) else shutil.which(name)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def program(pages, ready, *, namespaced=False, **env):
    """rt_prog serve preloaded, its page in pages (or, namespaced, in the
    /dev/shm of a mount namespace of its own); waits for $READY."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("CUPOOL_")}
    e.update(LD_PRELOAD=lib, LD_LIBRARY_PATH=sim, READY=ready, CUPOOL_SMALL_SEGMENT="2M",
             CUPOOL_MID_MAX="0", **env)
    if namespaced:
        args = ["unshare", "-m", "sh", "-c", f"mount -t tmpfs cupool-test /dev/shm && "
                f"exec {prog} serve"]
    else:
        e["CUPOOL_PAGE_DIR"] = pages
        args = [prog, "serve"]
    p = subprocess.Popen(args, env=e, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    for _ in range(500):
        if os.path.exists(ready) or p.poll() is not None:
            break
        time.sleep(0.01)
    time.sleep(0.3)  # its page published
    return p


def once(*dirs):
    args = [exporter, "--once"] + [x for d in dirs for x in ("--page-dir", d)]
    return subprocess.run(args, capture_output=True, text=True, timeout=30)


def series(text, name):
    """{labels-text: value} of the series name in an exposition."""
    out = {}
    for line in text.splitlines():
        m = re.match(rf"^{name}\{{(.*)\}} (\S+)$", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def query(port, q):
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": q})
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())["data"]["result"]


def check_prometheus(tmp, pids, skipped_page):
    """A real server scrapes the exporter: the series come with their labels
    and values; the page that lies is counted, not a failed scrape."""
    prom = tool("prometheus")
    if not prom:
        return skip("a real Prometheus scrapes the exporter", "no prometheus binary "
                    "(make test takes it out of Debian's package: scripts/get-promtool)")
    eport, pport = free_port(), free_port()
    ex = subprocess.Popen([exporter, "--listen", f"127.0.0.1:{eport}", "--page-dir",
                           f"{tmp}/pages", "--page-dir", "/dev/shm"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    with open(f"{tmp}/prometheus.yml", "w") as f:
        f.write(f"global: {{scrape_interval: 1s}}\nscrape_configs:\n  - job_name: cupool\n"
                f"    static_configs: [{{targets: ['127.0.0.1:{eport}']}}]\n")
    pr = subprocess.Popen([prom, f"--config.file={tmp}/prometheus.yml",
                           f"--storage.tsdb.path={tmp}/tsdb",
                           f"--web.listen-address=127.0.0.1:{pport}"],
                          stdout=subprocess.DEVNULL, stderr=open(f"{tmp}/prometheus.log", "w"))
    got, health = {}, []
    try:
        for _ in range(150):
            time.sleep(0.2)
            try:
                got = {r["metric"]["pid"]: r for r in query(pport, "cupool_reserved_bytes")}
                health = query(pport, 'up{job="cupool"}')
            except OSError:
                continue
            if all(str(p) in got for p in pids.values()):
                break
        want = all(str(p) in got for p in pids.values())
        report("a real Prometheus scrapes the exporter", want and health and
               health[0]["value"][1] == "1", f"series of pids {sorted(got)}, wanted "
               f"{sorted(pids.values())}; up {health}")
        if not want:
            return
        m = got[str(pids["grouped"])]["metric"]
        report("its series carry user, comm, device and group", m.get("user") and
               m.get("comm") == "rt_prog" and m.get("device") == "0" and
               m.get("group") == "gx", m)
        m = got[str(pids["slurm"])]["metric"]
        report("its series carry the Slurm job", m.get("slurm_job") == "77", m)
        ours = sum(float(r["value"][1]) for r in got.values())
        total = query(pport, 'cupool_node_reserved_bytes{device="0"}')
        report("the device's total is beside them", total and
               float(total[0]["value"][1]) >= ours, f"{total} against {ours}")
        sk = query(pport, 'cupool_exporter_pages_skipped_total{reason="foreign"}')
        report("a page that lies is skipped and counted, the scrape served",
               sk and float(sk[0]["value"][1]) >= 1, f"{sk} ({skipped_page})")
    finally:
        for p in (pr, ex):
            p.send_signal(signal.SIGTERM)
        for p in (pr, ex):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


def check_exporter():
    tmp = tempfile.mkdtemp(prefix="cupool-exporter-")
    os.makedirs(f"{tmp}/pages")
    procs, pids = [], {}
    try:
        procs.append(program(f"{tmp}/pages", f"{tmp}/r1", CUPOOL_GROUP="gx"))
        pids["grouped"] = procs[-1].pid
        procs.append(program(f"{tmp}/pages", f"{tmp}/r2", SLURM_JOB_ID="77"))
        pids["slurm"] = procs[-1].pid
        if os.geteuid() == 0 and shutil.which("unshare"):
            procs.append(program(None, f"{tmp}/r3", namespaced=True))
            if procs[-1].poll() is None:
                pids["namespaced"] = procs[-1].pid
        # A process that maps a file named as its own page that is none
        # (garbage of the right mode), and a file named as a sleeping
        # process's page that it does not map: the first is skipped and
        # counted, the second never read (the scan starts from what each
        # process maps).
        ns = os.stat("/proc/self/ns/pid").st_ino
        udir = glob.glob(f"{tmp}/pages/cupool-*")[0]
        sleeper = subprocess.Popen(["sleep", "60"])
        procs.append(sleeper)
        with open(os.open(f"{udir}/{ns}-{sleeper.pid}", os.O_WRONLY | os.O_CREAT, 0o600),
                  "w") as f:
            f.write("not a page\n")
        liar_ready = f"{tmp}/liar-ready"
        procs.append(subprocess.Popen([sys.executable, "-c", f"""
import mmap, os, time
fd = os.open("{udir}/{ns}-%d" % os.getpid(), os.O_RDWR | os.O_CREAT, 0o600)
os.write(fd, b"not a page\\n")
m = mmap.mmap(fd, 0)
open("{liar_ready}", "w").close()
time.sleep(60)
"""]))
        for _ in range(500):
            if os.path.exists(liar_ready):
                break
            time.sleep(0.01)
        fake = f"{udir}/{ns}-{procs[-1].pid}"
        r = once(f"{tmp}/pages", "/dev/shm")
        reserved = series(r.stdout, "cupool_reserved_bytes")
        seen = {m.group(1) for k in reserved for m in [re.search(r'pid="(\d+)"', k)] if m}
        report("exporter --once: every program's series", r.returncode == 0 and
               all(str(p) in seen for p in pids.values()), f"{seen} {pids} {r.stderr}")
        if "namespaced" in pids:
            report("a program in its own mount namespace, /dev/shm private, is seen",
                   str(pids["namespaced"]) in seen, seen)
        else:
            skip("a program in its own mount namespace, /dev/shm private, is seen",
                 "needs root and unshare")
        top = subprocess.run([os.path.abspath(os.path.join("build", "cupool-stat")), "top",
                              "--all", "--count", "1"], capture_output=True, text=True,
                             timeout=30, env=dict(os.environ, CUPOOL_PAGE_DIR=f"{tmp}/pages"))
        report("top --all: every program with its user and job", top.returncode == 0 and
               "USER JOB" in top.stdout and "group:gx" in top.stdout and "slurm:77" in
               top.stdout and all(re.search(rf"^{p} ", top.stdout, re.M)
                                  for p in pids.values()), top.stdout + top.stderr)
        skipped = series(r.stdout, "cupool_exporter_pages_skipped_total")
        report("exporter --once: the page that lies is skipped",
               skipped.get('reason="foreign"', 0) == 1, skipped)
        check_prometheus(tmp, pids, fake)
        t0 = time.monotonic()
        for _ in range(10):
            once(f"{tmp}/pages", "/dev/shm")
        print(f"     a scrape of {len(seen)} processes: {(time.monotonic() - t0) * 100:.1f} ms "
              "(the process included)", flush=True)
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=25)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)


def check_listen():
    r = subprocess.run([exporter, "--listen", "nonsense"], capture_output=True, text=True,
                       timeout=10)
    report("exporter --listen: a bad address is refused in one line", r.returncode == 2 and
           "ADDR:PORT" in r.stderr, r.stderr)
    r = subprocess.run([exporter, "--bogus"], capture_output=True, text=True, timeout=10)
    report("exporter: an unknown option is named", r.returncode == 2 and
           "unknown option '--bogus'" in r.stderr, r.stderr)


def check_rules():
    promtool = tool("promtool")
    if not promtool:
        return skip("the alert rules pass promtool test rules", "no promtool")
    d = os.path.join(root, "deploy", "prometheus")
    r = subprocess.run([promtool, "test", "rules", "cupool-alerts-test.yml"], cwd=d,
                       capture_output=True, text=True, timeout=60)
    report("the alert rules pass promtool test rules", r.returncode == 0, r.stdout + r.stderr)


def yaml_loader():
    """A Python with PyYAML: this one, or Debian's."""
    try:
        import yaml  # noqa: F401
        return [sys.executable]
    except ImportError:
        return ["/usr/bin/python3"]


def check_recipes():
    files = sorted(glob.glob(os.path.join(root, "deploy", "**", "*.y*ml"), recursive=True))
    r = subprocess.run(yaml_loader() + ["-c", "import sys, yaml\nfor f in sys.argv[1:]:\n"
                                        "    list(yaml.safe_load_all(open(f)))"] + files,
                       capture_output=True, text=True, timeout=60)
    report(f"the recipes' YAML parses ({len(files)} files)", r.returncode == 0 and files,
           r.stderr)
    known = set(subprocess.run([options, "list"], capture_output=True, text=True,
                               timeout=30).stdout.split())
    names = set()
    for f in glob.glob(os.path.join(root, "deploy", "**", "*"), recursive=True):
        if os.path.isfile(f):
            names |= set(re.findall(r"\bCUPOOL_[A-Z0-9_]+", open(f).read()))
    bad = sorted(n for n in names if n not in known and
                 not re.sub(r"_\d+$", "_<N>", n) in known)
    report("every CUPOOL_* name in the recipes is an option", names and not bad,
           f"not options: {bad}")


check_listen()
check_rules()
check_recipes()
check_exporter()
sys.exit(1 if failed else 0)
