#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""test_safety.py BUILD - cupool on a machine shared with other users, and
under host memory pressure. Each check runs real processes: the scenario
program preloaded with BUILD/libcupool.so over the simulated runtime, the
readers and the trace tools. Checks that need another user (root makes one,
`cupool-safety`, and removes it) or a mount are skipped, with the reason,
where the machine does not allow them.

Prints "ok NAME", "FAIL NAME: why" or "skip NAME: why", one line each."""
import os
import pwd
import shutil
import subprocess
import sys
import tempfile

build = sys.argv[1] if len(sys.argv) > 1 else "build"
lib = os.path.abspath(os.path.join(build, "libcupool.so"))
prog = os.path.abspath(os.path.join(build, "rt", "rt_prog"))
failmalloc = os.path.abspath(os.path.join(build, "rt", "libfailmalloc.so"))
reader = os.path.abspath(os.path.join(build, "cupool-stat"))
tracer = os.path.abspath(os.path.join(build, "cupool-trace"))
pauser = os.path.abspath(os.path.join("build", "cupool-pause"))  # not a sanitizer build
sim = os.path.abspath(os.path.join("build", "sim"))
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
install_deps = os.path.join(root, "scripts", "install-deps")
USER = "cupool-safety"
failed = 0


def report(name, cond, detail=""):
    global failed
    print(f"{'ok  ' if cond else 'FAIL'} {name}{': ' + str(detail)[-400:] if not cond else ''}",
          flush=True)
    failed += not cond


def skip(name, why):
    print(f"skip {name}: {why}", flush=True)


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("CUPOOL_") and k != "LD_PRELOAD"}
    env.update(CUPOOL_SMALL_SEGMENT="2M", CUPOOL_MID_MAX="0", LD_PRELOAD=lib,
               LD_LIBRARY_PATH=sim)  # the simulated runtime, wherever it is
    if os.environ.get("CUPOOL_PAGE_DIR"):  # the run's own (run-tests), not /dev/shm
        env["CUPOOL_PAGE_DIR"] = os.environ["CUPOOL_PAGE_DIR"]
    env.update(extra)
    return env


def run(args, env, user=None, timeout=60):
    """Runs args; as user (a pwd entry) when given."""
    def drop():
        os.setgroups([])
        os.setgid(user.pw_gid)
        os.setuid(user.pw_uid)
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout,
                          preexec_fn=drop if user else None, errors="replace")


made_user = False


def other_user():
    """The second user (made now, as root), or None with why."""
    global made_user
    if os.geteuid() != 0:
        return None, "needs root to make a second user"
    try:
        return pwd.getpwnam(USER), None
    except KeyError:
        pass
    try:
        p = subprocess.run(["useradd", "--system", "--no-create-home", "--shell",
                            "/usr/sbin/nologin", USER], capture_output=True, text=True)
    except OSError as e:
        return None, f"no useradd: {e}"
    if p.returncode:
        return None, f"useradd failed: {p.stderr.strip()}"
    made_user = True
    return pwd.getpwnam(USER), None


def reachable_by(user, tmp):
    """Where the second user can run what the tests run: the build as it
    is, or, when it is not theirs to reach (a clone in root's 0700 home),
    a copy of what the tests run in tmp (which is 0755). Repoints the
    paths above to the copy."""
    global lib, prog, failmalloc, reader, tracer, pauser, sim, install_deps
    if not user or run(["test", "-x", prog], {"PATH": "/usr/bin:/bin"}, user=user).returncode == 0:
        return
    copy = os.path.join(tmp, "reach")
    for d in ("rt", "sim", "scripts"):
        os.makedirs(os.path.join(copy, d), mode=0o755)
    os.chmod(copy, 0o755)

    def put(src, rel):
        dst = os.path.join(copy, rel)
        shutil.copy2(src, dst)
        os.chmod(dst, 0o755)
        return dst

    lib = put(lib, "libcupool.so")
    prog = put(prog, "rt/rt_prog")
    failmalloc = put(failmalloc, "rt/libfailmalloc.so")
    reader = put(reader, "cupool-stat")
    tracer = put(tracer, "cupool-trace")
    pauser = put(pauser, "cupool-pause")
    for name in os.listdir(sim):
        put(os.path.join(sim, name), os.path.join("sim", name))
    sim = os.path.join(copy, "sim")
    install_deps = put(install_deps, "scripts/install-deps")
    print(f"note: the build is not reachable by {USER}; its programs were copied to {copy}",
          flush=True)


def shared_dir(tmp, name):
    """A directory every user may write in, sticky, as /dev/shm is."""
    d = os.path.join(tmp, name)
    os.mkdir(d)
    os.chmod(d, 0o1777)
    return d


def wait_file(path, seconds=10):
    import time
    for _ in range(int(seconds * 100)):
        if os.path.exists(path):
            time.sleep(0.3)  # the page is published every 100 ms
            return True
        time.sleep(0.01)
    return False


def serve(env, ready, user=None):
    """rt_prog serve (it holds its blocks until SIGTERM), started."""
    def drop():
        os.setgroups([])
        os.setgid(user.pw_gid)
        os.setuid(user.pw_uid)
    env = dict(env, READY=ready)
    p = subprocess.Popen([prog, "serve"], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True,
                         preexec_fn=drop if user else None)
    return p if wait_file(ready) else (p.kill(), p.wait(), None)[2]


def stop(p):
    p.terminate()
    out, err = p.communicate(timeout=20)
    return p.returncode, out, err


# ---- files cupool writes --------------------------------------------------

def test_hard_links(tmp):
    """A second name of one of the user's files (another user's hard link,
    where fs.protected_hardlinks is off) is never truncated into a trace nor
    appended to."""
    for var, extra in (("CUPOOL_TRACE", {}), ("CUPOOL_STATS_FILE", {"CUPOOL_STATS_AT_EXIT": "1"})):
        victim = os.path.join(tmp, f"victim-{var}")
        link = os.path.join(tmp, f"link-{var}")
        with open(victim, "w") as f:
            f.write("precious\n")
        os.link(victim, link)
        p = run([prog, "pairs"], clean_env(**{var: link}, **extra))
        with open(victim, "rb") as f:
            kept = f.read() == b"precious\n"
        report(f"{var} refuses a file with two names", p.returncode == 0 and kept and
               "hard links" in p.stderr, p.stderr)


def test_trace_limit(tmp):
    """CUPOOL_TRACE_MAX stops the recording, whole records kept, and the
    program runs on."""
    trace = os.path.join(tmp, "limited.trace")
    p = run([prog, "pairs"], clean_env(CUPOOL_TRACE=trace, CUPOOL_TRACE_MAX="64K"))
    size = os.path.getsize(trace) if os.path.exists(trace) else -1
    d = run([tracer, "dump", trace], dict(os.environ))
    report("CUPOOL_TRACE_MAX bounds the trace", p.returncode == 0 and 0 < size <= 65536 and
           "CUPOOL_TRACE_MAX" in p.stderr and d.returncode == 0 and "partial" not in d.stderr,
           f"size {size}: {p.stderr} {d.stderr}")


def test_escapes_not_printed(tmp):
    """A path or value from the environment never puts control bytes on the
    terminal."""
    p = run([prog, "pairs"], clean_env(CUPOOL_TRACE="/nonexistent/\x1b[2J\x1b]0;owned\x07",
                                       CUPOOL_FENCE="\x1b[31mred", CUPOOL_STATS_FILE="/x/\x1b[H"))
    report("no escape sequence reaches stderr", p.returncode == 0 and "\x1b" not in p.stderr and
           "\x07" not in p.stderr and p.stderr.count("cupool:") >= 3, repr(p.stderr))


# ---- options --------------------------------------------------------------

def test_unknown_option():
    """A misspelled cap is named, by the library and by cupool run (which
    refuses to start the program)."""
    p = run([prog, "pairs"], clean_env(CUPOOL_MAX_RESERVE="20G"))
    lib_ok = p.returncode == 0 and "did you mean CUPOOL_MAX_RESERVED?" in p.stderr
    r = run([os.path.join(root, "scripts", "cupool"), "run", "--", "true"],
            dict(os.environ, CUPOOL_MAX_RESERVE="20G", CUPOOL_LIB=lib))
    report("a misspelled option is named", lib_ok and r.returncode == 2 and
           "CUPOOL_MAX_RESERVED" in r.stderr, p.stderr + r.stderr)


def test_every_bad_option_reported():
    """Forty bad values, forty lines (eight were shown, the rest dropped)."""
    bad = {f"CUPOOL_MAX_RESERVED_{d}": "lots" for d in range(40)}
    p = run([prog, "pairs"], clean_env(**bad))
    report("every bad option is reported", p.returncode == 0 and
           p.stderr.count("is invalid") == 40, f"{p.stderr.count('is invalid')} lines")


def test_secure_execution(tmp, user):
    """libcupool linked into a setuid-root program and run by another user:
    that user's CUPOOL_TRACE does not truncate a root-only file."""
    name = "a setuid program ignores its caller's options"
    if not user:
        return skip(name, user_why)
    d = os.path.join(tmp, "setuid")
    os.mkdir(d)
    os.chmod(d, 0o755)
    shutil.copy(lib, os.path.join(d, "libcupool.so"))
    src = os.path.join(d, "main.c")
    with open(src, "w") as f:
        f.write("int main(void) { return 0; }\n")
    exe = os.path.join(d, "privileged")
    c = subprocess.run(["cc", src, "-o", exe, "-L" + d, "-Wl,--no-as-needed", "-l:libcupool.so",
                        "-Wl,-rpath," + d], capture_output=True, text=True)
    if c.returncode:
        return report(name, False, c.stderr)
    os.chmod(exe, 0o4755)
    victim = os.path.join(d, "root-only")
    with open(victim, "w") as f:
        f.write("root's data\n")
    os.chmod(victim, 0o600)
    env = {"PATH": "/usr/bin:/bin", "CUPOOL_TRACE": victim, "CUPOOL_LOG": "debug"}
    p = run([exe], env, user=user)
    with open(victim, "rb") as f:
        kept = f.read() == b"root's data\n"
    report(name, p.returncode == 0 and kept and "privileged program" in p.stderr,
           f"kept {kept}: {p.stderr}")


# ---- live pages -----------------------------------------------------------

def test_squatted_names(tmp, user):
    """Another user makes the directory the victim's pages would go in, and
    files named like every page: the victim's process still has a page that
    stat and flush reach."""
    name = "pages survive another user's squatting"
    if not user:
        return skip(name, user_why)
    base = shared_dir(tmp, "squat")
    mine = os.path.join(base, f"cupool-{os.geteuid()}")
    # Every name a page could take, for the next 300 pids (as the attack
    # did for all of them), and the directory the user's pages go in.
    with open("/proc/sys/kernel/ns_last_pid") as f:
        last = int(f.read())
    ns = os.stat("/proc/self/ns/pid").st_ino
    listing = os.path.join(tmp, "squat-names")
    with open(listing, "w") as f:
        f.write("\n".join(f"cupool-{os.geteuid()}-{ns}-{pid}{sfx}" for pid in range(last, last + 300)
                          for sfx in [""] + [f".{k}" for k in range(1, 16)]))
    os.chmod(listing, 0o644)
    run(["/bin/sh", "-c", f"mkdir -m 777 {mine} && cd {base} && xargs touch < {listing}"],
        {"PATH": "/usr/bin:/bin"}, user=user)
    env = clean_env(CUPOOL_PAGE_DIR=base)
    p = serve(env, os.path.join(tmp, "squat-ready"))
    if not p:
        return report(name, False, "serve never got ready")
    s = run([reader, "stat", str(p.pid)], env)
    f = run([reader, "flush", str(p.pid)], env)
    rc, _, err = stop(p)
    report(name, os.stat(mine).st_uid == user.pw_uid and s.returncode == 0 and
           f.returncode == 0 and "returned" in f.stdout and rc == 0 and
           "is not this user's" in err, s.stderr + f.stderr + err)


def test_root_reads_other_users(tmp, user):
    """Root's cupool stat and flush reach another user's process."""
    name = "root reads and flushes another user's process"
    if not user:
        return skip(name, user_why)
    base = shared_dir(tmp, "rootread")
    env = clean_env(CUPOOL_PAGE_DIR=base)
    ready = os.path.join(base, "ready")
    p = serve(env, ready, user=user)
    if not p:
        return report(name, False, "serve never got ready")
    s = run([reader, "stat", str(p.pid)], env)
    f = run([reader, "flush", str(p.pid)], env)
    mine = run([reader, "stat", str(p.pid)], env, user=user)
    stop(p)
    report(name, s.returncode == 0 and "rt_prog" in s.stdout and f.returncode == 0 and
           mine.returncode == 0, s.stderr + f.stderr + mine.stderr)


def test_pause_other_users(tmp, user):
    """Another user cannot pause (or resume) a process: refused before the
    driver is asked anything."""
    name = "another user's process cannot be paused"
    if not user:
        return skip(name, user_why)
    base = shared_dir(tmp, "pause")
    ckpt = shared_dir(tmp, "ckpt")
    env = clean_env(CUPOOL_PAGE_DIR=base)
    p = serve(env, os.path.join(base, "ready"))
    if not p:
        return report(name, False, "serve never got ready")
    log = os.path.join(ckpt, "log")
    penv = dict(env, LD_LIBRARY_PATH=sim, SIMCUDA_CKPT_DIR=ckpt, SIMCUDA_CKPT_LOG=log)
    penv.pop("LD_PRELOAD")
    a = run([pauser, "pause", str(p.pid)], penv, user=user)
    b = run([pauser, "resume", str(p.pid)], penv, user=user)
    stop(p)
    report(name, a.returncode == 1 and "another user's" in a.stderr and b.returncode == 1 and
           not os.path.exists(log), a.stderr + b.stderr)


def test_install_deps_names_the_command(user):
    """A user who cannot install what make needs is told the one command."""
    name = "make's missing dependencies named in one command when not root"
    if not user:
        return skip(name, user_why)
    p = run([install_deps, "the tests", "libfoo-dev", "bar"],
            dict(os.environ), user=user)
    report(name, p.returncode == 1 and "sudo apt-get install -y libfoo-dev bar" in p.stderr,
           p.stdout + p.stderr)


def test_full_tmpfs(tmp, user):
    """Another user fills the page directory's tmpfs: processes run on
    without a page (they died of SIGBUS), and nothing is left behind."""
    name = "a full tmpfs fails the page, not the program"
    if not user:
        return skip(name, user_why)
    base = os.path.join(tmp, "small")
    os.mkdir(base)
    m = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=1777", "tmpfs", base],
                       capture_output=True, text=True)
    if m.returncode:
        return skip(name, f"cannot mount a tmpfs: {m.stderr.strip()}")
    try:
        run(["/bin/sh", "-c", f"cat /dev/zero > {base}/fill"], {"PATH": "/usr/bin:/bin"},
            user=user)
        env = clean_env(CUPOOL_PAGE_DIR=base)
        # An IPC export of a block inside a segment needs the page: refused
        # with the reason (the scenario fails), not a SIGBUS.
        runs = [run([prog, scen], env) for scen in ("pairs", "ipc")]
        mine = os.path.join(base, f"cupool-{os.geteuid()}")
        left = [n for n in os.listdir(base) if n.startswith("cupool-") and n != os.path.basename(mine)]
        left += os.listdir(mine) if os.path.isdir(mine) else []
        s = run([reader, "stat"], env)
        report(name, [r.returncode for r in runs] == [0, 1] and not left and
               "its export needs the live page" in runs[1].stderr and
               all("no live statistics page" in r.stderr for r in runs) and s.returncode == 0,
               [(r.returncode, r.stderr[-200:]) for r in runs] + [left])
    finally:
        subprocess.run(["umount", "-l", base])


# ---- groups ---------------------------------------------------------------

def group_member(tmp, page_dir, budget, group="g"):
    """rt_prog pairs as a member of group with budget, HOME unusable and no
    XDG_RUNTIME_DIR (no place but the page directory): (process, the caps
    its JSON statistics at exit say, per device)."""
    import json
    stats = os.path.join(tmp, f"group-stats-{os.getpid()}.json")
    env = clean_env(CUPOOL_PAGE_DIR=page_dir, HOME="/nonexistent", CUPOOL_GROUP=group,
                    CUPOOL_GROUP_MAX_RESERVED=budget, CUPOOL_STATS_AT_EXIT="1",
                    CUPOOL_STATS_FORMAT="json", CUPOOL_STATS_FILE=stats)
    env.pop("XDG_RUNTIME_DIR", None)
    p = run([prog, "pairs"], env)
    try:
        with open(stats) as f:
            caps = [d["cap"] for d in json.loads(f.read().splitlines()[-1])["devices"]]
        os.unlink(stats)
    except (OSError, ValueError, KeyError, IndexError) as e:
        caps = [repr(e)]
    return p, caps


def test_group_budget_never_off(tmp):
    """A member that cannot meet its group (its page directory unsafe and
    no other place; a full tmpfs) holds itself to the group's budget as a
    cap of its own, and says so; without a budget asked, its own cap
    alone. It ran uncapped before."""
    name = "a member that cannot meet its group holds itself to the budget"
    unsafe = os.path.join(tmp, "group-unsafe")
    os.mkdir(unsafe)
    os.chmod(unsafe, 0o777)  # others may write, not sticky: refused as a base
    p, caps = group_member(tmp, unsafe, "16M")
    q, none = group_member(tmp, unsafe, "0")
    report(name, p.returncode == 0 and caps == [16 << 20] and "cannot join" in p.stderr and
           q.returncode == 0 and none == [0], (caps, none, p.stderr[-300:]))
    name = "a member on a full tmpfs holds itself to the group's budget"
    if os.geteuid() != 0:
        return skip(name, "needs root to mount a tmpfs")
    small = os.path.join(tmp, "group-small")
    os.mkdir(small)
    m = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=1777", "tmpfs", small],
                       capture_output=True, text=True)
    if m.returncode:
        return skip(name, f"cannot mount a tmpfs: {m.stderr.strip()}")
    try:
        subprocess.run(["/bin/sh", "-c", f"cat /dev/zero > {small}/fill"], capture_output=True)
        p, caps = group_member(tmp, small, "16M")
        report(name, p.returncode == 0 and caps == [16 << 20], (caps, p.stderr[-300:]))
    finally:
        subprocess.run(["umount", "-l", small])


def test_group_budget_reset_when_none_lives(tmp):
    """A group whose members all ended takes its next first member's
    budget (it kept the first one's for ever)."""
    import json
    base = os.path.join(tmp, "group-reset")
    os.mkdir(base, 0o700)
    budgets = []
    for budget in ("60G", "16M"):
        group_member(tmp, base, budget, group="reset")
        r = run([reader, "stat", "--json", "--group", "reset"], dict(os.environ, CUPOOL_PAGE_DIR=base))
        try:
            budgets.append(json.loads(r.stdout)["budgets"][0]["bytes"])
        except (ValueError, KeyError, IndexError) as e:
            budgets.append(repr(e) + r.stderr)
    report("a group no member lives in takes its next member's budget",
           budgets == [60 << 30, 16 << 20], budgets)


# ---- what the tools print, and whose process they act on ------------------

def trace_named(path, comm):
    """A trace (two records) whose header names the program comm (bytes,
    up to 15), written as the recorder writes one (trace/trace.h)."""
    import struct
    header = (b"CUPOOLTR" + struct.pack("<IIIiQ", 1, 64, 24, 7, 0) + comm.ljust(16, b"\0") +
              bytes([2]) + bytes(15))
    records = b"".join(struct.pack("<QQQ", t, addr, size | op << 48)
                       for t, op, addr, size in ((0, 1, 0x1000, 4096), (10, 2, 0x1000, 0)))
    with open(path, "wb") as f:
        f.write(header + records)


def test_trace_escapes_not_printed(tmp):
    """The program name a trace holds (the recorded program's to choose) and
    the paths the trace tools print never put ESC or BEL on the terminal:
    dump, replay, plot to stdout, and their error lines."""
    trace = os.path.join(tmp, "esc-\x1b[2J.trace")
    trace_named(trace, b"\x1b]0;x\x07")
    runs = [["dump", trace], ["replay", trace], ["plot", trace, "-o", "-"],
            ["replay", trace, "--device", "7"], ["replay", "/nonexistent/\x1b]0;y\x07"],
            ["replay", trace, "--timeline", "/nonexistent/\x1b[H"],
            ["replay", trace, "--bogus\x1b[H"]]
    bad = []
    for args in runs:
        p = subprocess.run([tracer] + args, capture_output=True, timeout=60)
        if b"\x1b" in p.stdout + p.stderr or b"\x07" in p.stdout + p.stderr:
            bad.append((args[0], args[-1][-8:], (p.stdout + p.stderr)[:160]))
    d = subprocess.run([tracer, "dump", trace], capture_output=True, timeout=60)
    report("no escape sequence from a trace reaches the terminal",
           not bad and d.returncode == 0 and b"pid 7 (?]0;x?)" in d.stdout, bad or d.stdout[:200])


EVIL = "\x1b]0;owned\x07\x1b[2J\x7f\r\x08x"


def bad_bytes(b):
    """The bytes of b a terminal would act on: below 0x20 but newline and
    tab, and DEL."""
    return sorted({c for c in b if (c < 0x20 and c not in (0x0a, 0x09)) or c == 0x7f})


def test_page_escapes_not_printed(tmp):
    """A page says what its process's user wrote there (no cupool code is
    needed to write it): its program name, its gate's reason for refusing a
    suspend, its job and group (the process's environment), its name among
    a group's members. Every command that prints them (stat, top, job,
    flush, flush --nccl, dump, stat --group, pause and resume) prints no
    byte a terminal would act on."""
    name = "no escape sequence from a page reaches the terminal"
    base = os.path.join(tmp, "evil-pages")
    os.mkdir(base, 0o700)
    helper = os.path.abspath(os.path.join("build", "rt", "evil_page"))
    exe = os.path.join(tmp, "\x1b[2J\x1b]0;x\x07")  # its /proc comm: the name it runs as
    os.symlink(helper, exe)
    env = clean_env(CUPOOL_PAGE_DIR=base, EVIL_TEXT=EVIL, EVIL_GROUP="evil",
                    SLURM_JOB_ID=EVIL, CUPOOL_GROUP=EVIL)
    env.pop("LD_PRELOAD")
    ready = os.path.join(tmp, "evil-ready")
    p = subprocess.Popen([exe, ready], env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    if not wait_file(ready):
        p.kill()
        return report(name, False, "evil_page never got ready: " + p.communicate()[1].decode())
    ckpt = os.path.join(tmp, "evil-ckpt")
    os.mkdir(ckpt)
    penv = dict(env, LD_LIBRARY_PATH=sim, SIMCUDA_CKPT_DIR=ckpt,
                SIMCUDA_CKPT_LOG=os.path.join(ckpt, "log"))
    pid = str(p.pid)
    wait = ["--timeout", "60"]  # a loaded machine's answers come late
    runs = [[reader, "stat", pid], [reader, "stat"], [reader, "stat", "--json", pid],
            [reader, "top", "--count", "1"], [reader, "top", "--all", "--count", "1"],
            [reader, "top", "--count", "1", "--group", "evil"],
            [reader, "job", pid], [reader, "flush"] + wait + [pid],
            [reader, "flush", "--nccl"] + wait + [pid], [reader, "dump"] + wait + [pid],
            [reader, "stat", "--group", "evil"],
            [pauser, "pause"] + wait + [pid], [pauser, "resume", pid]]
    bad, said = [], {}
    try:
        for args in runs:
            r = subprocess.run(args, env=penv, capture_output=True, timeout=60)
            out = r.stdout + r.stderr
            said[" ".join(args[1:])] = out
            if bad_bytes(out):
                bad.append((os.path.basename(args[0]), args[1:-1] if args[-1] == pid else args[1:],
                            bad_bytes(out), out[:300]))
    finally:
        p.terminate()
        p.communicate(timeout=20)
    # The hostile strings did reach each command (each printed them, made
    # printable), so the check above saw them.
    # flush, dump and resume print none of them; stat --json escapes them
    # its own way (JSON's \\u001b).
    seen = [k for k, out in said.items() if b"?]0;owned?" in out or b"?[2J?]0;x?" in out]
    job = b"slurm:?]0;owned?" in said["top --all --count 1"]  # the job column, from its environment
    report(name, not bad and len(seen) >= 9 and job,
           [b[:3] for b in bad] or {k: said[k][:160] for k in sorted(set(said) - set(seen))})


def test_others_process_named(tmp, user):
    """stat, flush and dump of another user's process say it is another
    user's (whose page this user cannot read), not that it runs without
    cupool."""
    name = "stat, flush and dump name another user's process"
    if not user:
        return skip(name, user_why)
    base = shared_dir(tmp, "others")
    env = clean_env(CUPOOL_PAGE_DIR=base)
    p = serve(env, os.path.join(base, "ready"))  # root's, under cupool
    if not p:
        return report(name, False, "serve never got ready")
    renv = dict(env)
    renv.pop("LD_PRELOAD")
    runs = [run([reader, cmd, str(p.pid)], renv, user=user) for cmd in ("stat", "flush", "dump")]
    stop(p)
    want = f"cupool: {p.pid}: another user's process (its page cannot be read by this user)\n"
    report(name, all(r.returncode == 1 and r.stderr == want for r in runs),
           [r.stderr for r in runs])


def other_uid_process():
    """A process of another user: one started as nobody (as root), else the
    first of /proc that is not this user's. (Popen or None, pid), or
    (None, None)."""
    if os.geteuid() == 0:
        def nobody():
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
        p = subprocess.Popen(["sleep", "60"], preexec_fn=nobody)
        return p, p.pid
    for pid in sorted(int(n) for n in os.listdir("/proc") if n.isdigit()):
        try:
            with open(f"/proc/{pid}/status") as f:
                uids = next(l for l in f if l.startswith("Uid:")).split()[1:3]
        except (OSError, StopIteration):
            continue
        if any(int(u) != os.geteuid() for u in uids):
            return None, pid
    return None, None


def test_pause_in_user_namespace(tmp):
    """Root of a user namespace of its own (unshare -Ur) is the user it is
    outside, nothing more: its pause of another user's process (one the
    namespace does not map) is refused before the driver is asked
    anything; its own user's process pauses and resumes."""
    name = "pause inside a user namespace refuses another user's process"
    probe = subprocess.run(["unshare", "-Ur", "true"], capture_output=True, text=True)
    if probe.returncode:
        return skip(name, "unshare -Ur is not permitted here: "
                    + (probe.stderr.strip() or f"exit {probe.returncode}"))
    ckpt = os.path.join(tmp, "ns-ckpt")
    os.mkdir(ckpt)
    log = os.path.join(ckpt, "log")
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.abspath(os.path.join(build, "sim")),
               SIMCUDA_CKPT_DIR=ckpt, SIMCUDA_CKPT_LOG=log)
    pause = ["unshare", "-Ur", os.path.abspath(os.path.join(build, "cupool-pause"))]
    other, pid = other_uid_process()
    if pid is None:
        return skip(name, "no process of another user to try")
    mine = subprocess.Popen(["sleep", "60"])
    try:
        a = run(pause + ["pause", str(pid)], env)
        asked = os.path.exists(log)
        b = run(pause + ["pause", str(mine.pid)], env)
        c = run(pause + ["resume", str(mine.pid)], env)
    finally:
        for p in (other, mine):
            if p:
                p.kill()
                p.wait()
    report(name, a.returncode == 1 and "another user's" in a.stderr and "refused" in a.stderr
           and not asked and b.returncode == 0 and "paused" in b.stdout and c.returncode == 0,
           [a.returncode, a.stderr, asked, b.returncode, b.stdout + b.stderr, c.returncode,
            c.stderr])


# ---- NCCL jobs: cupool pause/resume/flush --nccl of a whole job ------------

class Job:
    """Ranks of an NCCL job (rt_prog job over the simulated NCCL), each an
    all-reduce every 20 ms, their pages in base; each rank its own
    counter file and the simulated NCCL's directory."""

    def __init__(self, tmp, name, base):
        self.dir = os.path.join(tmp, name)
        os.mkdir(self.dir)
        os.chmod(self.dir, 0o755)
        self.base, self.id, self.procs = base, os.path.join(self.dir, "id"), []

    def start(self, rank, nranks, user=None, **extra):
        """Starts rank of nranks (as user), waits until it is ready: its
        pid, or None if it never got ready."""
        k = len(self.procs)
        own = os.path.join(self.dir, f"r{k}")
        os.mkdir(own)
        if user:
            os.chown(own, user.pw_uid, user.pw_gid)
        env = clean_env(CUPOOL_PAGE_DIR=self.base, READY=f"{own}/ready", JOB_ID=self.id,
                        JOB_RANK=str(rank), JOB_NRANKS=str(nranks), JOB_EVERY="2",
                        JOB_COUNT=f"{own}/count", SIMNCCL_DIR=own, SIMNCCL_MEMSTATS="1",
                        **extra)

        def drop():
            os.setgroups([])
            os.setgid(user.pw_gid)
            os.setuid(user.pw_uid)
        p = subprocess.Popen([prog, "job"], env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True,
                             preexec_fn=drop if user else None)
        self.procs.append(p)
        if not wait_file(f"{own}/ready"):
            return None
        if os.path.exists(self.id):
            os.chmod(self.id, 0o644)  # another user's fake rank may copy it
        return p.pid

    def count(self, k):
        try:
            with open(os.path.join(self.dir, f"r{k}", "count")) as f:
                return int(f.read() or 0)
        except (OSError, ValueError):
            return 0

    def running(self, ks, seconds=5):
        """Whether each of ranks ks goes on all-reducing (waits up to
        seconds for each count to move)."""
        import time
        before = {k: self.count(k) for k in ks}
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            if all(self.count(k) > before[k] for k in ks):
                return True
            time.sleep(0.05)
        return False

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.communicate(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.communicate()


def job_counters(job, pid, user=None):
    """nccl_gate_closes and nccl_suspends of pid's page (as its user reads
    it), or None."""
    import json
    r = run([reader, "stat", "--json", str(pid)], clean_env(CUPOOL_PAGE_DIR=job.base), user=user)
    try:
        d = json.loads(r.stdout)["process"]
        return d["nccl_gate_closes"], d["nccl_suspends"]
    except (ValueError, KeyError):
        return None


def job_control(job, ckpt, *args):
    """cupool-pause (or cupool-stat for flush) with the simulated driver's
    checkpoints in ckpt: (its run, the driver's log of lock and
    checkpoint calls, the pids checkpointed now)."""
    env = dict(clean_env(CUPOOL_PAGE_DIR=job.base), SIMCUDA_CKPT_DIR=ckpt,
               SIMCUDA_CKPT_LOG=os.path.join(ckpt, "log"), LD_LIBRARY_PATH=sim)
    env.pop("LD_PRELOAD")
    tool = reader if args[0] == "flush" else pauser
    r = run([tool] + list(args), env)
    try:
        with open(os.path.join(ckpt, "log")) as f:
            calls = [l for l in f if "lock" in l or "checkpoint" in l]
    except OSError:
        calls = []
    paused = set()
    for name in os.listdir(ckpt):
        if name.isdigit():
            with open(os.path.join(ckpt, name)) as f:
                if f.read().strip() not in ("", "0"):
                    paused.add(int(name))
    return r, calls, paused


def untouched(job, pids, ks, ckpt_calls, paused):
    """Why nothing-done does not hold ("" if it does): no gate closed, no
    communicator suspended, no driver lock or checkpoint, every rank runs."""
    bad = [(pid, c) for pid, c in ((pid, job_counters(job, pid)) for pid in pids)
           if c != (0, 0)]
    if bad:
        return f"gate closes and suspends (pid, (closes, suspends)): {bad}"
    if ckpt_calls or paused:
        return f"the driver was asked: {ckpt_calls} {paused}"
    return "" if job.running(ks) else "a rank stopped all-reducing"


def job_refused(tmp, name, ranks, **extra):
    """Starts ranks ((rank, nranks, extra env) each) and pauses the first:
    refused with nothing done, and flush --nccl the same."""
    base = shared_dir(tmp, f"{name}-pages")
    ckpt = shared_dir(tmp, f"{name}-ckpt")
    job = Job(tmp, name, base)
    try:
        pids = [job.start(r, n, **e) for r, n, e in ranks]
        if None in pids:
            return report(f"{name}: its ranks start", False, pids)
        a, calls, paused = job_control(job, ckpt, "pause", str(pids[0]))
        why = untouched(job, pids, range(len(pids)), calls, paused)
        f, calls, paused = job_control(job, ckpt, "flush", "--nccl", str(pids[0]))
        why = why or untouched(job, pids, range(len(pids)), calls, paused)
        report(f"{name}: cupool pause and flush --nccl refuse, nothing done",
               a.returncode == 1 and f.returncode == 1 and not why,
               [a.returncode, f.returncode, why, a.stderr, f.stderr])
    finally:
        job.stop()


def test_job_refused(tmp):
    """A job not all here is refused before any rank is touched: a rank
    not running, a third process claiming a rank of a two-rank
    communicator, ranks whose NCCL has no ncclCommSuspend."""
    job_refused(tmp, "a rank missing", [(0, 3, {}), (1, 3, {})])
    job_refused(tmp, "a rank claimed twice", [(0, 2, {}), (1, 2, {}), (1, 2, {})])
    nosus = {"SIMNCCL_LIB": "libnccl-nosuspend.so"}
    job_refused(tmp, "no ncclCommSuspend", [(0, 2, nosus), (1, 2, nosus)])


def job_paused_whole(tmp, name, base, others=()):
    """A two-rank job in base, with others ((rank, nranks, user) each,
    claiming its communicator) beside it: cupool job of rank 0 lists rank 1
    alone, no rank elsewhere; cupool pause of rank 0 pauses both ranks (and
    no other), resume runs them again, flush --nccl suspends both. (passed,
    detail)."""
    import json
    import time
    ckpt = shared_dir(tmp, f"{name}-ckpt")
    job = Job(tmp, name, base)
    try:
        pids = [job.start(0, 2), job.start(1, 2)]
        pids += [job.start(r, n, user=u) for r, n, u in others]
        if None in pids:
            return False, f"a rank never got ready: {pids}"
        v = run([reader, "job", "--json", str(pids[0])], clean_env(CUPOOL_PAGE_DIR=base))
        try:
            c = json.loads(v.stdout)["communicators"][0]
            view = (sorted(x["pid"] for x in c["peers"]), c["ranks_elsewhere"])
        except (ValueError, KeyError, IndexError):
            view = v.stdout + v.stderr
        a, _, paused = job_control(job, ckpt, "pause", str(pids[0]))
        closes = [job_counters(job, pid, u) for pid, u in
                  zip(pids, [None, None] + [u for _, _, u in others])]
        b, _, still = job_control(job, ckpt, "resume", str(pids[1]))
        runs = job.running([0, 1])
        f, _, _ = job_control(job, ckpt, "flush", "--nccl", str(pids[1]))
        sus = []
        for _ in range(100):  # each page is published again within 100 ms
            sus = [job_counters(job, pid) for pid in pids[:2]]
            if all(c == (2, 2) for c in sus):
                break
            time.sleep(0.05)
        others_run = job.running(range(2, len(pids))) if others else True
        ok = (a.returncode == 0 and paused == set(pids[:2]) and b.returncode == 0 and
              not still and runs and f.returncode == 0 and
              all(c == (2, 2) for c in sus) and
              all(c == (0, 0) for c in closes[2:]) and others_run and view == ([pids[1]], 0))
        return ok, [a.returncode, paused, pids, b.returncode, still, runs, f.returncode, sus,
                    closes, others_run, view, a.stderr, b.stderr, f.stderr]
    finally:
        job.stop()


def test_job_decoys_and_squats(tmp, user):
    """Another user's 2048 decoy page directories beside the victim's (1024
    hid every process: a job pause stopped rank 0 alone), or the victim's
    page directory made first by another user (every job pause was
    refused, its lock had nowhere to go): the job is paused whole, resumed,
    its communicators suspended by flush --nccl."""
    if os.geteuid() != 0:
        return skip("a job among decoys and squats is paused whole", "needs root")
    squatter = user or pwd.getpwuid(65534)
    base = shared_dir(tmp, "decoyed-pages")
    run(["/bin/sh", "-c", f"cd {base} && mkdir -p $(seq -f 'cupool-%.0f' 1000000 1002047)"],
        {"PATH": "/usr/bin:/bin"}, user=squatter)
    ok, detail = job_paused_whole(tmp, "decoyed", base)
    report("a job among 2048 decoy directories is paused whole", ok and
           len(os.listdir(base)) > 2048, detail)
    base = shared_dir(tmp, "squatted-pages")
    mine = os.path.join(base, f"cupool-{os.geteuid()}")
    run(["mkdir", "-m", "777", mine], {"PATH": "/usr/bin:/bin"}, user=squatter)
    ok, detail = job_paused_whole(tmp, "squatted", base)
    report("a job whose page directory another user made first is paused whole", ok and
           os.stat(mine).st_uid == squatter.pw_uid, detail)


def test_job_foreign_rank(tmp, user):
    """Another user's process claims the job's communicator (its id copied
    from the job): left out of root's pause, named, untouched; where it
    claims the rank that is missing, the pause is refused, nothing done."""
    name = "another user's rank claiming the job's communicator"
    if not user:
        return skip(name, user_why)
    base = shared_dir(tmp, "foreign-pages")
    ok, detail = job_paused_whole(tmp, "foreign", base, others=[(1, 2, user)])
    report(f"{name} is left out and named, the job paused whole",
           ok and str(detail[2][2]) in detail[-3], detail)
    job_refused(tmp, f"{name}, the one missing", [(0, 2, {}), (1, 2, {"user": user})])


# ---- host memory ----------------------------------------------------------

MISLABELS = ("out of device memory", "cause: fragmentation", "cause: the device is out of memory")


def test_shim_host_memory():
    """Host malloc failing from the Nth call on, for every N up to where the
    scenario no longer needs more: cupool never calls it device memory or
    fragmentation, and never crashes (the simulated runtime may abort)."""
    bad = []
    for n in range(0, 120, 2):
        for scen in ("pairs", "cap"):
            p = run([prog, scen], clean_env(LD_PRELOAD=f"{lib}:{failmalloc}",
                                            FAILMALLOC_AFTER=str(n),
                                            CUPOOL_MAX_RESERVED="16M"))
            if any(m in p.stderr for m in MISLABELS):
                bad.append((scen, n, p.stderr[-300:]))
            if p.returncode in (128 + 11, -11, 139):
                bad.append((scen, n, "crashed"))
    report("host memory failures are named as such in the shim", not bad, bad[:2])


def test_replay_host_memory():
    """The replay with host malloc failing: its figures, or an error and a
    non-zero exit; never other figures (it printed 954562 failures)."""
    trace = os.path.join(root, "test", "data", "train.trace.gz")
    want = run([tracer, "replay", trace, "--policy", "best", "--json"], dict(os.environ))
    if want.returncode:
        return report("replay under host memory failures", False, want.stderr)
    bad, refused = [], 0
    for n in list(range(0, 60, 3)) + list(range(60, 4000, 97)):
        p = run([tracer, "replay", trace, "--policy", "best", "--json"],
                dict(os.environ, LD_PRELOAD=failmalloc, FAILMALLOC_AFTER=str(n)))
        if p.returncode == 0 and p.stdout != want.stdout:
            bad.append((n, "other figures"))
        elif p.returncode not in (0, 1) or (p.returncode == 1 and "memory" not in p.stderr):
            bad.append((n, p.returncode, p.stderr[-200:]))
        refused += p.returncode == 1
    report("replay under host memory failures: its figures or an error", not bad and refused,
           bad[:3])


if __name__ == "__main__":
    with tempfile.TemporaryDirectory(prefix="cupool-safety-") as tmp:
        os.chmod(tmp, 0o755)
        user, user_why = other_user()
        reachable_by(user, tmp)
        test_hard_links(tmp)
        test_trace_limit(tmp)
        test_escapes_not_printed(tmp)
        test_unknown_option()
        test_every_bad_option_reported()
        test_secure_execution(tmp, user)
        test_squatted_names(tmp, user)
        test_root_reads_other_users(tmp, user)
        test_pause_other_users(tmp, user)
        test_trace_escapes_not_printed(tmp)
        test_page_escapes_not_printed(tmp)
        test_others_process_named(tmp, user)
        test_pause_in_user_namespace(tmp)
        test_job_refused(tmp)
        test_job_decoys_and_squats(tmp, user)
        test_job_foreign_rank(tmp, user)
        test_install_deps_names_the_command(user)
        test_full_tmpfs(tmp, user)
        test_group_budget_never_off(tmp)
        test_group_budget_reset_when_none_lives(tmp)
        test_shim_host_memory()
        test_replay_host_memory()
    if made_user:
        subprocess.run(["userdel", USER], capture_output=True)
    sys.exit(1 if failed else 0)
