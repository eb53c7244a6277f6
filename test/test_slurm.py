#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""test_slurm.py BUILD - deploy/slurm/cupool-task-prolog.sh under a real
one-node Slurm: Debian's munged, slurmctld and slurmd started as root from a
temporary directory (their configuration, keys, state, spool, logs, pid
files and a fake GPU, a link to /dev/null, all there; ports of their own),
the recipe as the cluster's TaskProlog. Two jobs share the node's one GPU by
GRES shards (srun --gres=shard:2, a batch job with --gres=shard:4 whose
script runs srun), each task BUILD/rt/rt_prog serve on the simulated
runtime: each is preloaded and capped at its share of the device, as `cupool
stat --json` shows, and `cupool exporter --once` labels it with its job. A
job with a whole GPU (--gres=gpu:1) runs preloaded, uncapped.

Where the node's cgroup v1 freezer is mounted, Slurm tracks the jobs'
processes in cgroups (proctrack/cgroup), and the exporter's slurm_job must
come from the job's cgroup; elsewhere (Slurm 22.05's cgroup/v2 is for a host
of cgroup v2 alone under systemd) it runs with proctrack/linuxproc, and the
label may come from the task's environment (claimed_slurm_job or slurm_job).
The test says which held.

Skipped, with the reason, where it cannot run: not root, Slurm not
installed (make test installs slurmctld, slurmd and munge as root with
apt-get), the daemons not up within their deadline. Everything it starts
is ended by its process id, and the directory removed, even on failure.

Prints "ok NAME", "FAIL NAME: why" or "skip NAME: why", one line each."""
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

build = sys.argv[1] if len(sys.argv) > 1 else "build"
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
lib = os.path.abspath(os.path.join(build, "libcupool.so"))
prog = os.path.abspath(os.path.join(build, "rt", "rt_prog"))
cupool_stat = os.path.abspath(os.path.join("build", "cupool-stat"))  # not a sanitizer build
exporter = os.path.abspath(os.path.join("build", "cupool-exporter"))
sim = os.path.abspath(os.path.join("build", "sim"))
prolog = os.path.join(root, "deploy", "slurm", "cupool-task-prolog.sh")
NEEDED = ("munged", "slurmctld", "slurmd", "srun", "sbatch", "squeue", "sinfo", "scancel")
SHARDS = 8            # shards of the fake GPU: the recipe's SHARDS_PER_GPU default
CAPACITY = 8 << 30    # the simulated device's memory
# Deadlines for events that take a few seconds on an idle machine, with
# room for one that two other make test runs load (issue 57).
START_S = 60          # the daemons up, the node idle
CLAIM = "424242"      # the job that job b's task claims in its environment
TASK_S = 120          # a job's task started and publishing its page
END_S = 40            # a job gone once its task was told to end
failed = 0

CHECKS = {
    "a": "srun --gres=shard:2: the task preloaded, capped at 2 of 8 shards (25%)",
    "b": "a batch job with --gres=shard:4, its srun's task capped at 50%",
    "group": "both tasks in the node's group slurm-HOST, budget 95%",
    "label": "cupool exporter labels each task with its Slurm job",
    "gpu": "srun --gres=gpu:1: the task preloaded, uncapped",
}


def report(name, cond, detail=""):
    global failed
    print(f"{'ok  ' if cond else 'FAIL'} {name}{': ' + str(detail)[-900:] if not cond else ''}",
          flush=True)
    failed += not cond


def skip(name, why):
    print(f"skip {name}: {why}", flush=True)


class Unavailable(Exception):
    """The one-node cluster cannot be had here: every check is skipped."""


def wait_for(what, deadline_s, probe, step=0.1):
    """probe()'s first true value within deadline_s, or TimeoutError
    naming what was waited for."""
    end = time.monotonic() + deadline_s
    while True:
        got = probe()
        if got:
            return got
        if time.monotonic() > end:
            raise TimeoutError(f"waited {deadline_s} s for {what}")
        time.sleep(step)


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def unavailable():
    """Why the cluster cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root (it runs munged, slurmctld and slurmd)"
    missing = [t for t in NEEDED if not shutil.which(t)]
    if missing:
        return (f"Slurm is not installed (no {', '.join(missing)}): apt-get install "
                "slurmctld slurmd munge (make test does it as root with apt-get)")
    for f in (lib, prog, cupool_stat, exporter):
        if not os.access(f, os.X_OK if not f.endswith(".so") else os.R_OK):
            return f"{f} is not built"
    return None


def cgroup_v1_freezer():
    """Whether the node has a cgroup v1 freezer hierarchy, which Slurm
    22.05's proctrack/cgroup can use without systemd."""
    try:
        with open("/proc/self/mounts") as f:
            return any(len(w) > 3 and w[1] == "/sys/fs/cgroup/freezer" and w[2] == "cgroup"
                       and "freezer" in w[3].split(",") for w in map(str.split, f))
    except OSError:
        return False


class Cluster:
    """munged, slurmctld and slurmd of one node, everything in tmp."""

    def __init__(self, tmp, proctrack):
        self.tmp, self.proctrack = tmp, proctrack
        self.node = socket.gethostname().split(".")[0]
        self.daemons = []
        self.cgroup_root = f"/sys/fs/cgroup/freezer/slurm_{self.node}"
        self.cgroup_was = os.path.exists(self.cgroup_root)
        self.env = dict(os.environ, SLURM_CONF=f"{tmp}/slurm.conf")

    def write_config(self):
        t = self.tmp
        for d in ("state", "spool", "pages", "home", "tmp"):
            os.makedirs(f"{t}/{d}", mode=0o700)
        # A fake GPU named as the driver's first device: Slurm refuses a
        # File= that is not a character or block device; it follows links.
        os.symlink("/dev/null", f"{t}/nvidia0")
        with open(os.open(f"{t}/munge.key", os.O_WRONLY | os.O_CREAT, 0o600), "wb") as f:
            f.write(os.urandom(1024))
        ctld_port, d_port = free_ports(2)
        conf = {
            "ClusterName": "cupooltest",
            "SlurmctldHost": f"{self.node}(127.0.0.1)",
            "SlurmctldPort": ctld_port, "SlurmdPort": d_port,
            "SlurmUser": "root", "SlurmdUser": "root",
            "AuthType": "auth/munge", "CredType": "cred/munge",
            "AuthInfo": f"socket={t}/munge.socket",
            "StateSaveLocation": f"{t}/state", "SlurmdSpoolDir": f"{t}/spool",
            "SlurmctldPidFile": f"{t}/slurmctld.pid", "SlurmdPidFile": f"{t}/slurmd.pid",
            "SlurmctldLogFile": f"{t}/slurmctld.log", "SlurmdLogFile": f"{t}/slurmd.log",
            "PlugStackConfig": f"{t}/plugstack.conf",
            "ProctrackType": self.proctrack, "TaskPlugin": "task/none",
            "SelectType": "select/cons_tres", "SelectTypeParameters": "CR_Core",
            "SchedulerType": "sched/builtin", "MpiDefault": "none",
            "AccountingStorageType": "accounting_storage/none",
            "JobAcctGatherType": "jobacct_gather/none", "JobCompType": "jobcomp/none",
            "SwitchType": "switch/none", "ReturnToService": 2,
            "GresTypes": "gpu,shard", "TaskProlog": prolog,
            # One CPU whatever the machine has, shared by the jobs.
            "NodeName": f"{self.node} NodeAddr=127.0.0.1 CPUs=1 "
                        f"Gres=gpu:1,shard:{SHARDS} State=UNKNOWN",
            "PartitionName": f"test Nodes={self.node} Default=YES MaxTime=5 "
                             "OverSubscribe=FORCE:4 State=UP",
        }
        with open(f"{t}/slurm.conf", "w") as f:
            f.writelines(f"{k}={v}\n" for k, v in conf.items())
        with open(f"{t}/gres.conf", "w") as f:
            f.write(f"AutoDetect=off\nName=gpu File={t}/nvidia0\n"
                    f"Name=shard Count={SHARDS} File={t}/nvidia0\n")
        with open(f"{t}/cgroup.conf", "w") as f:
            f.write("CgroupPlugin=cgroup/v1\n" if self.proctrack == "proctrack/cgroup" else "")
        open(f"{t}/plugstack.conf", "w").close()

    def daemon(self, name, args):
        log = open(f"{self.tmp}/{name}.out", "w")
        p = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                             env=self.env, cwd=self.tmp, start_new_session=True)
        log.close()
        self.daemons.append(p)
        return p

    def why_down(self, err):
        """err, and the last error line of the daemons' logs."""
        lines = []
        for n in ("munged.log", "slurmctld.log", "slurmd.log", "munged.out",
                  "slurmctld.out", "slurmd.out"):
            try:
                with open(f"{self.tmp}/{n}", errors="replace") as f:
                    lines += [f"{n}: {x.strip()}" for x in f if re.search(r"rror|atal", x)]
            except OSError:
                pass
        return f"{err}{'; ' + lines[-1] if lines else ''}"

    def node_state(self):
        r = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], capture_output=True, text=True,
                           env=self.env, timeout=10)
        return r.stdout.strip() if r.returncode == 0 else ""

    def start(self):
        t = self.tmp
        self.write_config()
        self.daemon("munged", ["munged", "-F", "--force", f"--key-file={t}/munge.key",
                               f"--socket={t}/munge.socket", f"--pid-file={t}/munged.pid",
                               f"--log-file={t}/munged.log", f"--seed-file={t}/munged.seed"])
        try:
            wait_for("munged's socket", START_S, lambda: os.path.exists(f"{t}/munge.socket"))
            self.daemon("slurmctld", ["slurmctld", "-D", "-f", f"{t}/slurm.conf"])
            self.daemon("slurmd", ["slurmd", "-D", "-f", f"{t}/slurm.conf"])
            wait_for("the node idle in sinfo (slurmctld up, slurmd registered)", START_S,
                     lambda: self.node_state() == "idle" or self.died(), step=0.3)
        except (TimeoutError, subprocess.TimeoutExpired) as e:
            raise Unavailable(self.why_down(e)) from None
        if self.died():
            raise Unavailable(self.why_down(f"{self.died()} exited at start"))

    def died(self):
        dead = [os.path.basename(p.args[0]) for p in self.daemons if p.poll() is not None]
        return ", ".join(dead)

    def stop(self):
        """Ends the daemons, then every process still holding a file or its
        working directory in tmp (slurmstepd keeps slurmd's log open, the
        tasks run there), by process id; removes the job cgroups' root if
        this test made it."""
        for p in reversed(self.daemons):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in reversed(self.daemons):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)
        killed = set()
        try:
            wait_for("the cluster's processes gone", 10, lambda: self.sweep(killed), step=0.2)
        except TimeoutError as e:
            print(f"     {e}", flush=True)
        if killed:
            print(f"     killed what was left: {', '.join(sorted(killed))}", flush=True)
        if not self.cgroup_was:
            try:
                wait_for(f"{self.cgroup_root} removed", 10, self.cgroups_removed, step=0.2)
            except TimeoutError as e:
                print(f"     {e}", flush=True)

    def cgroups_removed(self):
        """Removes the job cgroups' root and what is in it (the last of
        the tasks may still be leaving): True once it is gone."""
        for d, _, _ in os.walk(self.cgroup_root, topdown=False):
            try:
                os.rmdir(d)
            except OSError:
                pass
        return not os.path.exists(self.cgroup_root)

    def sweep(self, killed):
        """Kills every process other than this one using tmp, adding each
        one's name to killed: True once there is none."""
        left = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            if int(pid) == os.getpid():
                continue
            try:
                links = [os.readlink(f"/proc/{pid}/cwd")] + [
                    os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
            except OSError:
                continue
            if any(x == self.tmp or x.startswith(self.tmp + "/") for x in links):
                left.append(int(pid))
                try:
                    with open(f"/proc/{pid}/comm") as f:
                        killed.add(f"{f.read().strip()} ({pid})")
                    os.kill(int(pid), signal.SIGKILL)
                except OSError:
                    pass
        return not left


def user_env(cluster, **extra):
    """A job's submitting environment: nothing of cupool or of Slurm from
    outside, its page directory, home and TMPDIR in tmp, the build's
    library named to the recipe (LIBCUPOOL, read by the TaskProlog)."""
    t = cluster.tmp
    e = {k: v for k, v in cluster.env.items()
         if not k.startswith(("CUPOOL_", "SLURM_", "SIMCUDA_")) and
         k not in ("LD_PRELOAD", "XDG_RUNTIME_DIR")}
    e.update(SLURM_CONF=f"{t}/slurm.conf", CUPOOL_PAGE_DIR=f"{t}/pages", HOME=f"{t}/home",
             TMPDIR=f"{t}/tmp", LIBCUPOOL=lib, LD_LIBRARY_PATH=sim, SIMCUDA_DEVICES="1",
             SIMCUDA_CAPACITY=str(CAPACITY), **extra)
    return e


def environ(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return dict(x.decode(errors="replace").split("=", 1)
                        for x in f.read().split(b"\0") if b"=" in x)
    except OSError:
        return {}


def task_pids(cluster):
    """{READY value: pid} of the programs publishing a page in tmp/pages."""
    out = {}
    pages = f"{cluster.tmp}/pages"
    for d in os.listdir(pages):
        if d.startswith("cupool-") and os.path.isdir(f"{pages}/{d}"):
            for name in os.listdir(f"{pages}/{d}"):
                m = re.fullmatch(r"\d+-(\d+)", name)
                ready = m and environ(m.group(1)).get("READY")
                if ready:
                    out[ready] = int(m.group(1))
    return out


def start_jobs(cluster):
    """Job a by srun, job b by sbatch (its script runs srun): {key: (pid
    of its task, its job id, its srun or None)}."""
    t = cluster.tmp
    with open(f"{t}/job-a.out", "w") as out:
        a = subprocess.Popen(["srun", "-J", "cupool-a", "-t", "2", "--gres=shard:2", prog,
                              "serve"], env=user_env(cluster, READY=f"{t}/ready-a"), cwd=t,
                             stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                             start_new_session=True)
    # Job b's task claims another job in its environment: its label must
    # not believe it where the job's cgroup says otherwise.
    with open(f"{t}/job-b.sh", "w") as f:
        f.write(f"#!/bin/sh\nexec srun env SLURM_JOB_ID={CLAIM} {prog} serve\n")
    r = subprocess.run(["sbatch", "--parsable", "-J", "cupool-b", "-t", "2", "--gres=shard:4",
                        "-o", f"{t}/job-b.out", f"{t}/job-b.sh"],
                       env=user_env(cluster, READY=f"{t}/ready-b"), cwd=t, capture_output=True,
                       text=True, timeout=30)
    if r.returncode:
        raise RuntimeError(f"sbatch failed: {r.stderr.strip()}")
    try:
        pids = wait_for("both jobs' tasks allocating ($READY) and publishing their pages",
                        TASK_S, lambda: (lambda p: p if len(p) == 2 and all(
                            os.path.exists(r) for r in p) else None)(task_pids(cluster)))
    except TimeoutError as e:
        raise RuntimeError(f"{e}; job a: {open(f'{t}/job-a.out').read()[-300:]}; squeue: "
                           f"{squeue(cluster)}") from None
    a_pid, b_pid = pids[f"{t}/ready-a"], pids[f"{t}/ready-b"]
    return {"a": (a_pid, environ(a_pid).get("SLURM_JOB_ID"), a),
            "b": (b_pid, r.stdout.strip().split(";")[0], None)}


def squeue(cluster):
    r = subprocess.run(["squeue", "-h", "-o", "%i %T %R"], capture_output=True, text=True,
                       env=cluster.env, timeout=10)
    return r.stdout.strip()


def stat_json(pid, cluster):
    r = subprocess.run([cupool_stat, "stat", "--json", str(pid)], capture_output=True,
                       text=True, timeout=30, env=user_env(cluster))
    try:
        return json.loads(r.stdout)
    except ValueError:
        return {"error": r.stdout + r.stderr}


def check_capped(key, pid, share, cluster):
    """The task's environment from the recipe, its devices' caps share% of
    the device in cupool stat."""
    env = environ(pid)
    try:
        s = wait_for(f"task {pid}'s page showing its device", 10, lambda: (
            lambda j: j if j.get("devices") else None)(stat_json(pid, cluster)), step=0.2)
    except TimeoutError as e:
        s = {"error": str(e)}
    caps = [d.get("cap") for d in s.get("devices", [])]
    want = CAPACITY * share // 100
    report(CHECKS[key], env.get("LD_PRELOAD") == lib and
           env.get("CUPOOL_MAX_RESERVED") == f"{share}%" and caps and
           all(c == want for c in caps),
           f"LD_PRELOAD={env.get('LD_PRELOAD')} CUPOOL_MAX_RESERVED="
           f"{env.get('CUPOOL_MAX_RESERVED')} SLURM_SHARDS_ON_NODE="
           f"{env.get('SLURM_SHARDS_ON_NODE')}; caps {caps}, wanted {want}; {s.get('error', '')}")


def labels_of(scrape, pid):
    """The labels of pid's cupool_reserved_bytes series on device 0."""
    for line in scrape.splitlines():
        if line.startswith("cupool_reserved_bytes{") and f'pid="{pid}"' in line:
            lab = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', line.split("}")[0]))
            if lab.get("device") == "0":
                return lab
    return {}


def cgroup_job(pid):
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            m = re.search(r"/job_(\d+)(/|$)", f.read(), re.M)
    except OSError:
        return None
    return m and m.group(1)


def exporter_once(cluster):
    """One scrape of the tasks' pages; the node's one fake GPU named where
    the exporter counts the node's GPUs (--devices: this machine has none)."""
    h = subprocess.run([exporter, "--help"], capture_output=True, text=True, timeout=10)
    gpus = ["--devices", "1"] if "--devices" in h.stdout + h.stderr else []
    return [exporter, "--once", "--page-dir", f"{cluster.tmp}/pages"] + gpus


def check_labels(jobs, cluster):
    """slurm_job from the job's cgroup where the task has one (job b's
    task claims another in its environment); else the job its environment
    names, as claimed_slurm_job or slurm_job."""
    r = subprocess.run(exporter_once(cluster), capture_output=True, text=True, timeout=30)
    held, bad = set(), []
    for key, (pid, job, _) in jobs.items():
        lab, cg = labels_of(r.stdout, pid), cgroup_job(pid)
        claim = environ(pid).get("SLURM_JOB_ID")
        if cg:
            ok = job and cg == job and lab.get("slurm_job") == job
            held.add("slurm_job from the job's cgroup")
        elif claim and lab.get("claimed_slurm_job") == claim:
            ok = True
            held.add("claimed_slurm_job from the environment (no job cgroup)")
        else:
            ok = claim and lab.get("slurm_job") == claim
            held.add("slurm_job from the environment (no job cgroup)")
        if not ok:
            bad.append(f"job {key} ({job}, cgroup job {cg}, its environment's {claim}): {lab}")
    report(CHECKS["label"], not bad and r.returncode == 0, f"{bad} {r.stderr}")
    print(f"     the label held: {'; '.join(sorted(held))} ({cluster.proctrack})", flush=True)
    grouped = [(lambda lab: lab.get("group", lab.get("claimed_group")))(labels_of(r.stdout, pid))
               for pid, _, _ in jobs.values()]
    envs = [environ(pid).get("CUPOOL_GROUP_MAX_RESERVED") for pid, _, _ in jobs.values()]
    report(CHECKS["group"], grouped == [f"slurm-{cluster.node}"] * 2 and envs == ["95%"] * 2,
           f"groups {grouped}, budgets {envs}")


def end_jobs(jobs, cluster):
    """Tells each task to end (rt_prog serve ends on SIGTERM), then waits
    for the jobs to leave the queue."""
    for pid, _, _ in jobs.values():
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass
    try:
        wait_for("both jobs gone from squeue after their tasks ended", END_S,
                 lambda: squeue(cluster) == "", step=0.3)
    except TimeoutError as e:
        report("the jobs end when their tasks do", False, f"{e}: {squeue(cluster)}")
    for _, _, srun in jobs.values():
        if srun:
            try:
                srun.wait(timeout=END_S)
            except subprocess.TimeoutExpired:
                srun.kill()


def check_whole_gpu(cluster):
    r = subprocess.run(["srun", "-J", "cupool-gpu", "-t", "1", "--gres=gpu:1", "sh", "-c",
                        'echo "$LD_PRELOAD|${CUPOOL_MAX_RESERVED-none}|'
                        '${CUPOOL_GROUP-none}"'],
                       env=user_env(cluster), cwd=cluster.tmp, capture_output=True, text=True,
                       timeout=60)
    report(CHECKS["gpu"], r.returncode == 0 and r.stdout.strip() == f"{lib}|none|none",
           f"rc {r.returncode}: {r.stdout.strip()} {r.stderr.strip()}")


def run_checks(cluster):
    t0 = time.monotonic()
    jobs = start_jobs(cluster)
    print(f"     both tasks up {time.monotonic() - t0:.1f} s after submission "
          f"(jobs {jobs['a'][1]} and {jobs['b'][1]})", flush=True)
    try:
        check_capped("a", jobs["a"][0], 25, cluster)
        check_capped("b", jobs["b"][0], 50, cluster)
        check_labels(jobs, cluster)
    finally:
        end_jobs(jobs, cluster)
    check_whole_gpu(cluster)


def start_cluster(tmp):
    """A started cluster: with job cgroups where the node allows, else
    tracking processes by their parents; Unavailable if neither starts."""
    modes = (["proctrack/cgroup"] if cgroup_v1_freezer() else []) + ["proctrack/linuxproc"]
    why = []
    for mode in modes:
        d = tempfile.mkdtemp(prefix="run-", dir=tmp)
        os.chmod(d, 0o700)
        c = Cluster(d, mode)
        try:
            c.start()
            if mode != "proctrack/cgroup":
                print("     no job cgroups: Slurm tracks the jobs with proctrack/linuxproc "
                      f"({'; '.join(why) or 'no cgroup v1 freezer hierarchy'})", flush=True)
            return c
        except Unavailable as e:
            c.stop()
            why.append(f"{mode}: {e}")
    raise Unavailable("; ".join(why))


def main():
    # make test's timeout ends this with SIGTERM: the cleanup still runs.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("test_slurm.py: terminated"))
    why = unavailable()
    if why:
        for name in CHECKS.values():
            skip(name, why)
        return 0
    # One such cluster on the node at a time: Slurm names its job cgroups
    # after the host (slurm_<node>), which two make test runs side by side
    # would share. The lock is on slurmd's own file, which every run opens
    # alike and none leaves behind.
    import fcntl
    node_lock = open(shutil.which("slurmd"), "rb")
    fcntl.flock(node_lock, fcntl.LOCK_EX)
    tmp = tempfile.mkdtemp(prefix="cupool-slurm-")
    t0 = time.monotonic()
    cluster = None
    try:
        cluster = start_cluster(tmp)
        print(f"     {subprocess.run(['slurmd', '-V'], capture_output=True, text=True).stdout.strip()}"
              f" up in {time.monotonic() - t0:.1f} s ({cluster.proctrack})", flush=True)
        run_checks(cluster)
    except Unavailable as e:
        for name in CHECKS.values():
            skip(name, f"the one-node Slurm did not start: {e}")
    except (RuntimeError, TimeoutError, subprocess.TimeoutExpired) as e:
        report("the jobs' tasks start", False, e)
    finally:
        if cluster:
            cluster.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"     {time.monotonic() - t0:.1f} s in all", flush=True)
    return 1 if failed else 0


sys.exit(main())
