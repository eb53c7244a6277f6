#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""test_docs_examples.py BUILD [DOC...] - runs every example of README.md,
docs/GUIDE.md and deploy/README.md on the simulated CUDA runtime, and
compares what it prints with what the doc shows, so that an example cannot
go stale.

Every fenced block of those docs says what it is:
  ```sh       commands (a line ending in a backslash, a pipe or && goes
              on in the next), each run: each must exit 0
  ```console  "$ COMMAND" lines, each run (each must exit 0), each followed
              by what it prints
  ```text     (or any other language): shown, not run
An HTML comment "<!-- not run: REASON -->" on the line before a sh or
console block keeps it from running: it is counted as skipped, with its
reason. A block without a language is a mistake, reported.

Each doc runs in one bash, command after command, as a user following it
in one terminal would: a variable set or a program started with & in one
block is there in the next. Each block starts in the sandbox's working
directory. The sandbox is the doc's own: HOME, TMPDIR, CUPOOL_PAGE_DIR and
the working directory under a temporary directory (scripts/, build/,
test/, docs/ and deploy/ there are links into the checkout); scripts/,
build/ and build/tools/ on PATH; LD_LIBRARY_PATH=build/sim (the simulated
CUDA driver, which cupool pause loads). Placeholders the docs use for the
reader's own things get stand-ins (STAND_INS, PLACEHOLDERS): ./prog (and
./my_program, ./train) is a small program on the simulated runtime; PID
and <pid> a program under cupool holding memory (rt_prog serve), for as
long as the block runs; run.trace (and TRACE) a recorded PyTorch training
run (test/data/train.trace.gz).

What a console block shows is compared line by line with what its command
printed (stdout and stderr together): runs of blanks are one blank, words
and numbers must be equal, except what differs from run to run (VOLATILE:
the session's process ids, times of day, durations, rates, NCCL
communicator ids, the user's name). A "..." line stands for lines left
out; without one at the start (or the end), the output must start (or
end) where the block does.

Prints one line per block: "ok DOC:LINE", "FAIL DOC:LINE: COMMAND: why"
(naming the line of the command), or "skip DOC:LINE: REASON"; then how
many blocks ran and how many were skipped, by reason."""
import collections
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time

build = sys.argv[1] if len(sys.argv) > 1 else "build"
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
build = os.path.join(root, build)
DOCS = ["README.md", "docs/GUIDE.md", "deploy/README.md"]
LINKS = ["scripts", "build", "test", "docs", "deploy"]
TIMEOUT = 30  # seconds for one command: every example takes well under 5
failed = 0
skipped = collections.Counter()


def report(status, where, why=""):
    global failed
    failed += status == "FAIL"
    if status == "skip":
        skipped[why] += 1
    print(f"{status:4} {where}" + (f": {why}" if why else ""), flush=True)


# ---- the docs' blocks ----

class Block:
    """A fenced block: its doc, the line of its fence, its language, its
    lines (each with its line number) and why it is not run (or None)."""

    def __init__(self, doc, line, lang, skip):
        self.doc, self.line, self.lang, self.skip = doc, line, lang, skip
        self.lines = []

    def where(self, line=None):
        return f"{self.doc}:{line or self.line}"


def blocks_of(doc):
    """The fenced blocks of doc, in order."""
    out, cur, prev = [], None, ""
    with open(os.path.join(root, doc)) as f:
        for n, text in enumerate(f.read().split("\n"), 1):
            fence = re.match(r"^\s*```(\S*)\s*$", text)
            if fence and cur is None:
                skip = re.match(r"^\s*<!-- not run: (.*?) -->\s*$", prev)
                cur = Block(doc, n, fence.group(1), skip.group(1) if skip else None)
            elif fence:
                out.append(cur)
                cur = None
            elif cur is not None:
                cur.lines.append((n, text))
            prev = text
    return out


def join_continued(lines):
    """(line number, command) for each command of lines: a line ending in
    a backslash, a pipe or && goes on in the next, as in a shell."""
    out, start, acc = [], None, ""
    for n, text in lines:
        start = start or n
        acc += text + "\n"
        if not re.search(r"(\\|\||&&)\s*$", text.split(" #")[0]):
            out.append((start, acc.rstrip("\n")))
            start, acc = None, ""
    if acc:
        out.append((start, acc.rstrip("\n")))
    return out


def console_steps(block):
    """(line, command, shown output lines) for each "$ " command of a
    console block."""
    steps = []
    lines = block.lines
    i = 0
    while i < len(lines):
        n, text = lines[i]
        if not text.startswith("$ "):
            if text.strip():
                raise ValueError(f"{block.where(n)}: output before any '$ ' command")
            i += 1
            continue
        cmd = [(n, text[2:])]
        while cmd[-1][1].endswith("\\") and i + 1 < len(lines):
            i += 1
            cmd.append(lines[i])
        shown = []
        while i + 1 < len(lines) and not lines[i + 1][1].startswith("$ "):
            i += 1
            shown.append(lines[i][1])
        while shown and not shown[-1].strip():
            shown.pop()
        steps.append((n, "\n".join(t for _, t in cmd), shown))
        i += 1
    return steps


# ---- the comparison ----

VOLATILE = re.compile(
    r"\b\d{1,2}:\d\d:\d\d\b"                            # a time of day
    r"|\b\d+(\.\d+)? ?(s|ms|us|µs|ns)\b"                # a duration
    r"|\b\d+(\.\d+)? ?([KMGT]i?B|bytes?)/s\b"           # a rate
    r"|\(\d+(\.\d+)? ?[KMGT]iB/s\)"
    r"|\b[0-9a-f]{16}\b"                                # an NCCL communicator's id
    r'|(?<=user=")[^"]*(?=")')                          # who runs it


def tokens(line):
    """line as comparable tokens: what differs from run to run a
    placeholder, blank runs one blank, numbers apart from words."""
    line = re.sub(r"\s+", " ", VOLATILE.sub("<var>", line)).strip()
    return re.findall(r"\d+|\D+", line)


def line_eq(want, have, pids):
    """Whether a shown line (as tokens) is a printed one: equal, but where
    the printed number is a process id of the session, any number."""
    return len(want) == len(have) and all(
        w == h or (w.isdigit() and h in pids) for w, h in zip(want, have))


def matches(shown, got, pids):
    """None if the output got matches what the block shows, else why not."""
    have = [tokens(g) for g in got]
    while have and not have[-1]:
        have.pop()
    # Chunks between "..." lines, each a contiguous run of lines, in order.
    chunks, cur = [], []
    for s in shown:
        if s.strip() == "...":
            chunks.append(cur)
            cur = []
        else:
            cur.append(tokens(s))
    chunks.append(cur)
    anchored_start = not (shown and shown[0].strip() == "...")
    anchored_end = not (shown and shown[-1].strip() == "...")
    pos = 0
    for k, chunk in enumerate(chunks):
        first = k == 0 and anchored_start
        last = k == len(chunks) - 1 and anchored_end
        starts = [pos] if first else range(pos, len(have) - len(chunk) + 1)
        found = None
        for at in starts:
            if (all(line_eq(w, h, pids) for w, h in zip(chunk, have[at:at + len(chunk)]))
                    and at + len(chunk) <= len(have)
                    and (not last or at + len(chunk) == len(have))):
                found = at
                break
        if found is None:
            return mismatch(chunk, have[pos:], first, last, pids)
        pos = found + len(chunk)
    return None


def mismatch(chunk, have, first, last, pids):
    """Why chunk is not in have: the first shown line it lacks."""
    for w in chunk:
        if not any(line_eq(w, h, pids) for h in have):
            return f"it shows '{''.join(w)}', which was not printed"
    if first and chunk:
        return f"it shows '{''.join(chunk[0])}' first, but '{''.join(have[0])}' came first"
    if last:
        return "what was printed goes on past what it shows (a '...' line for the rest)"
    return "the lines it shows were not printed together, in that order"


# ---- the session: one bash per doc ----

STAND_INS = {
    # The reader's own program: a small one on the simulated runtime that
    # allocates and frees (2000 pairs), whatever its arguments. (The
    # reader's trace, run.trace, is test/data/train.trace.gz: sandbox().)
    "prog": "#!/bin/sh\nPAIR_N=2000 exec {root}/build/rt/rt_prog pairbench\n",
}
PLACEHOLDERS = [
    (re.compile(r"(?<![\w/.-])(PID|<pid>)(?![\w-])"), '"$CUPOOL_DOC_PID"'),
    (re.compile(r"(?<![\w/.-])\./(my_program|train)(?![\w/.-])"), "./prog"),
    (re.compile(r"(?<![\w/.-])TRACE(?![\w-])"), "run.trace"),
]


def sandbox(top):
    """The sandbox's working directory, with its links and stand-ins."""
    work = os.path.join(top, "work")
    for d in ("work", "home", "tmp", "pages", "meta"):
        os.mkdir(os.path.join(top, d), 0o700)
    for d in LINKS:
        os.symlink(os.path.join(root, d), os.path.join(work, d))
    with open(os.path.join(work, "prog"), "w") as f:
        f.write(STAND_INS["prog"].format(root=root))
    os.chmod(os.path.join(work, "prog"), 0o755)
    shutil.copy(os.path.join(root, "test/data/train.trace.gz"), os.path.join(work, "run.trace"))
    return work


def environment(top):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CUPOOL_", "SIMCUDA_"))}
    env.pop("LD_PRELOAD", None)
    env.update(HOME=f"{top}/home", TMPDIR=f"{top}/tmp", CUPOOL_PAGE_DIR=f"{top}/pages",
               SIMCUDA_CKPT_DIR=f"{top}/tmp", SIMNCCL_DIR=f"{top}/tmp",
               LD_LIBRARY_PATH=f"{build}/sim", LC_ALL="C", TERM="dumb",
               PATH=f"{root}/scripts:{build}:{build}/tools:{env['PATH']}")
    return env


class Session:
    """One bash, fed one command at a time; each command's output goes to
    a file of its own (a program it leaves running keeps writing there)."""

    def __init__(self, top):
        self.top, self.n, self.pids = top, 0, set()
        self.work = sandbox(top)
        self.start()

    def start(self):
        # The shell's own messages (a job's end) go to a file: its stdout
        # carries the exit statuses alone.
        with open(f"{self.top}/meta/shell.err", "a") as err:
            self.sh = subprocess.Popen(["bash", "--noprofile", "--norc"], cwd=self.work,
                                       env=environment(self.top), stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, stderr=err, text=True,
                                       start_new_session=True)
        self.pending = b""

    def reset(self):
        """Back in the sandbox's directory, and what a block unset of the
        sandbox's environment set again (the README's walk-through unsets
        CUPOOL_PAGE_DIR at its end); what a block set stays, as do shell
        variables and programs left running."""
        env = environment(self.top)
        self.run_raw(f"cd {self.work}; export " + " ".join(
            f"{k}=\"${{{k}:-{env[k]}}}\"" for k in ("HOME", "TMPDIR", "CUPOOL_PAGE_DIR",
                                                    "PATH", "LD_LIBRARY_PATH")))

    def run(self, cmd):
        """Runs cmd: (exit status or None on a timeout, its output lines)."""
        for pattern, stand_in in PLACEHOLDERS:
            cmd = pattern.sub(stand_in, cmd)
        if "CUPOOL_DOC_PID" in cmd:
            self.stand_in_pid()
        self.n += 1
        meta = f"{self.top}/meta/{self.n}"
        with open(f"{meta}.sh", "w") as f:
            f.write(cmd + "\n")
        self.sh.stdin.write(f"source {meta}.sh >{meta}.out 2>&1 </dev/null; "
                            f"echo \"__rc $? ${{!:-}}\"\n")
        self.sh.stdin.flush()
        rc = self.answer()
        with open(f"{meta}.out", errors="replace") as f:
            return rc, f.read().split("\n")

    def answer(self):
        """The exit status the shell reports, noting the last background
        pid; None (and a fresh shell) after TIMEOUT seconds."""
        deadline = time.monotonic() + TIMEOUT
        fd = self.sh.stdout.fileno()
        while time.monotonic() < deadline:
            if b"\n" not in self.pending:
                if not select.select([fd], [], [], 0.5)[0]:
                    continue
                data = os.read(fd, 4096)
                if not data:
                    break
                self.pending += data
                continue
            line, self.pending = self.pending.split(b"\n", 1)
            m = re.match(r"__rc (\d+) ?(\d*)", line.decode())
            if m:
                if m.group(2):
                    self.pids.add(m.group(2))
                return int(m.group(1))
        self.stop()
        self.start()
        return None

    def stand_in_pid(self):
        """Starts (once a block, and again if it ended) a program under
        cupool holding memory, for PID: rt_prog serve, until run_block
        ends it."""
        if self.run_raw('[ -n "${CUPOOL_DOC_PID-}" ] && kill -0 "$CUPOOL_DOC_PID"') == 0:
            return
        ready = f"{self.top}/meta/ready.{self.n}"
        self.run_raw(f"READY={ready} scripts/cupool run -- build/rt/rt_prog serve 600 "
                     f">{self.top}/meta/serve.{self.n} 2>&1 & CUPOOL_DOC_PID=$!; "
                     f"until [ -e {ready} ]; do sleep 0.05; done")

    def run_raw(self, cmd):
        """Runs the runner's own cmd (no placeholders, its output kept
        apart): its exit status, None on a timeout."""
        self.n += 1
        meta = f"{self.top}/meta/{self.n}"
        self.sh.stdin.write(f"{{ {cmd}; }} >{meta}.out 2>&1 </dev/null; "
                            f"echo \"__rc $? ${{!:-}}\"\n")
        self.sh.stdin.flush()
        return self.answer()

    def stop(self):
        """Ends the shell and everything it left running."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.sh.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.sh.wait(timeout=5)
                time.sleep(0.2 if sig == signal.SIGTERM else 0)
            except subprocess.TimeoutExpired:
                pass
        self.sh.wait()


# ---- running the blocks ----

def first_line(cmd):
    return cmd.split("\n")[0].rstrip("\\").strip()


def run_block(s, block):
    """Runs block in session s: None if it held, else (line, command, why).
    The stand-in for PID lives as long as the block."""
    s.reset()
    try:
        return run_steps(s, block)
    finally:
        s.run_raw('[ -n "${CUPOOL_DOC_PID-}" ] && kill "$CUPOOL_DOC_PID" && '
                  'wait "$CUPOOL_DOC_PID"; unset CUPOOL_DOC_PID')


def run_steps(s, block):
    """Each command of block: None if all held, else (line, command, why)."""
    if block.lang == "sh":
        steps = [(n, cmd, None) for n, cmd in join_continued(block.lines)
                 if cmd.strip() and not cmd.lstrip().startswith("#")]
    else:
        steps = console_steps(block)
    for n, cmd, shown in steps:
        rc, out = s.run(cmd)
        why = (f"ran past {TIMEOUT} s" if rc is None else f"exited {rc}" if rc
               else matches(shown, out, s.pids) if shown is not None else None)
        if why:
            return n, cmd, why + tail(out)
    return None


def tail(out):
    text = "\n".join(out).rstrip("\n")
    return "; it printed:\n    " + "\n    ".join(text.split("\n")[-15:]) if text else ""


def run_doc(doc):
    """Runs every block of doc in one session; reports each."""
    blocks = blocks_of(doc)
    with tempfile.TemporaryDirectory(prefix="cupool-docs-") as top:
        s = Session(top)
        try:
            for b in blocks:
                if not b.lang:
                    report("FAIL", b.where(), "a block without a language (sh, console, text)")
                elif b.lang not in ("sh", "console"):
                    continue
                elif b.skip:
                    report("skip", b.where(), b.skip)
                else:
                    try:
                        bad = run_block(s, b)
                    except ValueError as e:  # a console block's output before its command
                        report("FAIL", b.where(), str(e))
                        continue
                    if bad:
                        report("FAIL", b.where(bad[0]), f"`{first_line(bad[1])}`: {bad[2]}")
                    else:
                        report("ok", b.where())
        finally:
            s.stop()


def before_make():
    """scripts/cupool --version before a build: the source's version, and
    the other commands name what to build."""
    with tempfile.TemporaryDirectory(prefix="cupool-docs-") as top:
        for d in ("scripts", "stats"):
            os.mkdir(os.path.join(top, d))
        shutil.copy(os.path.join(root, "scripts/cupool"), os.path.join(top, "scripts"))
        shutil.copy(os.path.join(root, "stats/stats.h"), os.path.join(top, "stats"))

        def run(*args):
            p = subprocess.run([os.path.join(top, "scripts/cupool"), *args],
                               capture_output=True, text=True, timeout=30)
            return p.returncode, p.stdout + p.stderr

        version = re.search(r'#define CUPOOL_VERSION "(.*)"',
                            open(os.path.join(root, "stats/stats.h")).read()).group(1)
        got = [run("--version"), run("stat")]
        os.remove(os.path.join(top, "stats/stats.h"))
        got.append(run("--version"))
        want = [(0, f"cupool {version} (not built yet: make)\n"),
                (2, "cupool: cupool-stat not found (run 'make')\n"),
                (1, "cupool: cupool-stat not found: build first (make)\n")]
        report("ok" if got == want else "FAIL", "cupool --version and stat before make",
               "" if got == want else f"got {got}")


if __name__ == "__main__":
    t0 = time.monotonic()
    before_make()
    for d in sys.argv[2:] or DOCS:
        run_doc(d)
    print(f"docs examples: {sum(skipped.values())} blocks not run"
          + "".join(f"; {n}: {why}" for why, n in skipped.most_common())
          + f"; {time.monotonic() - t0:.1f} s")
    sys.exit(1 if failed else 0)
