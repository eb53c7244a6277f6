# SPDX-License-Identifier: Apache-2.0
"""cupool import-torch on a snapshot recorded on an H200 by
test/gpu/torch_snapshot.py (test/data/torch_snapshot.pickle.gz), checked
against what the snapshot's *segment state* says (independent of the trace
the importer reads) and against PyTorch's own figures at that moment
(test/data/torch_snapshot.json); then its refusals of bad input.
Usage: test_import_torch.py BUILD_DIR"""
import contextlib
import gzip
import io
import json
import os
import pickle
import resource
import subprocess
import sys
import tempfile
import zlib

build = sys.argv[1] if len(sys.argv) > 1 else "build"
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
cupool = os.path.join(root, "scripts", "cupool")
tool = os.path.join(build, "cupool-trace")
data = os.path.join(root, "test", "data")
env = dict(os.environ, CUPOOL_TRACE_BIN=os.path.abspath(tool))
failed = 0


def check(name, cond, detail=""):
    global failed
    print(f"{'ok  ' if cond else 'FAIL'} {name}{': ' + str(detail) if detail and not cond else ''}")
    failed += not cond


def run(*args):
    return subprocess.run(args, env=env, capture_output=True, text=True)


with tempfile.TemporaryDirectory() as tmp:
    trace = os.path.join(tmp, "torch.trace")
    p = run(cupool, "import-torch", os.path.join(data, "torch_snapshot.pickle.gz"), "-o", trace)
    check("import succeeds", p.returncode == 0, p.stderr)

    # The blocks left live by the trace are exactly the snapshot's active
    # blocks, each with the size its caller asked for.
    live = {}
    for line in run(tool, "dump", trace).stdout.splitlines():
        if line.startswith("#"):
            continue
        _, op, _, addr, size, _ = line.split()
        if op == "alloc":
            live[int(addr, 16)] = int(size)
        elif op == "free":
            del live[int(addr, 16)]
    snap = pickle.loads(gzip.decompress(open(os.path.join(data, "torch_snapshot.pickle.gz"), "rb").read()))
    active = {b["address"]: b["requested_size"] for s in snap["segments"] for b in s["blocks"]
              if b["state"] == "active_allocated"}
    check("live blocks = the snapshot's active blocks", live == active,
          f"{len(live)} live vs {len(active)} active")
    truth = json.load(open(os.path.join(data, "torch_snapshot.json")))
    rep = json.loads(run(tool, "replay", trace, "--json", "--policy", "best").stdout)
    dev = rep["devices"][0]
    v = dev["policies"][0]
    check("replay ends with PyTorch's live block count",
          v["end_live_blocks"] == truth["active_blocks"], v)
    check("no unmatched frees", v["unmatched_frees"] == 0, v)
    check("recorded peak reserved = torch.cuda.max_memory_reserved()",
          dev["recorded_peak_reserved"] == truth["max_memory_reserved"], dev)
    # cupool's pool rounds like PyTorch's (512 B) but leaves no remainder
    # unsplit below 1 MiB of a large block, so its peak allocated is close
    # to PyTorch's and never below the bytes asked for.
    ratio = v["peak_allocated"] / truth["max_memory_allocated"]
    check("replay peak allocated within 1% of PyTorch's", 0.99 <= ratio <= 1.01, ratio)

    # Bad input: one clear line, no Python traceback.
    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))
    cases = {
        "code.pickle": pickle.dumps(Evil()),
        "list.pickle": pickle.dumps([1, 2, 3]),
        "cut.pickle.gz": gzip.compress(pickle.dumps({"device_traces": []}))[:20],
        "empty.pickle": pickle.dumps({"segments": [], "device_traces": [[]]}),
    }
    for name, blob in cases.items():
        path = os.path.join(tmp, name)
        open(path, "wb").write(blob)
        p = run(cupool, "import-torch", path, "-o", os.path.join(tmp, "x.trace"))
        check(f"refuses {name}", p.returncode == 1 and "Traceback" not in p.stderr
              and "pwned" not in p.stdout and p.stderr.count("\n") == 1, p.stderr)
    p = run(cupool, "import-torch", os.path.join(data, "torch_snapshot.pickle.gz"))
    check("usage error without -o", p.returncode == 2 and "usage" in p.stderr, p.stderr)

    # Memory bounded by what the input holds: a gzip bomb (1 GiB of zeros
    # in 1 MB) and a pickle naming one entry a million times (3 MB that
    # would become a million events) are refused in one line, within a
    # 1 GiB memory limit that the bomb alone would break.
    def refused(name, blob, why):
        path = os.path.join(tmp, name)
        open(path, "wb").write(blob)
        p = subprocess.run(["python3", "-c", "import resource,sys,runpy; "
                            "resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30)); "
                            "sys.argv=sys.argv[1:]; runpy.run_path(sys.argv[0], "
                            "run_name='__main__')",
                            os.path.join(root, "scripts", "cupool-import-torch"), path,
                            "-o", os.path.join(tmp, "x.trace")],
                           env=env, capture_output=True, text=True, timeout=120)
        check(f"refuses {name}", p.returncode == 1 and "Traceback" not in p.stderr
              and p.stderr.count("\n") == 1 and why in p.stderr, p.stderr[-300:])

    z = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = bytes(1 << 20)
    bomb = b"".join(z.compress(zeros) for _ in range(1024)) + z.flush()
    refused("bomb.pickle.gz", bomb, "gzip bomb")
    e = {"action": "alloc", "addr": 4096, "size": 512, "time_us": 1}
    refused("repeat.pickle", pickle.dumps({"device_traces": [[e] * 1000000]}),
            "named again and again")
    # Values of the wrong type or range: one line each, no traceback.
    for key, bad in (("addr", "abc"), ("addr", -5), ("size", 1.5), ("size", 1 << 60),
                     ("time_us", "x"), ("addr", True)):
        ent = dict(e, **{key: bad})
        blob = pickle.dumps({"device_traces": [[ent] * 2, [dict(e, addr=8192)] * 40]})
        blob += bytes(4096)  # enough bytes for its entries
        refused(f"bad-{key}-{bad!r}.pickle", blob, f"{key} is")

    # Values no str() can print: an integer of 66000 bits, a list nested
    # 100000 deep (each once made a traceback).
    refused("huge-int.pickle", pickle.dumps({"device_traces": [[dict(e, addr=10**20000)]]})
            + bytes(4096), "integer of")
    def uni(text):  # pickle's BINUNICODE
        return b"X" + len(text).to_bytes(4, "little") + text.encode()
    deep = (b"\x80\x02}" + uni("device_traces") + b"]]}" + uni("action") + uni("alloc") +
            b"s" + uni("addr") + b"]" * 100000 + b"a" * 99999 + b"saas." + bytes(4096))
    refused("deep.pickle", deep, "addr is a list")
    # Memory: a 30 KB gzip of 30 million empty dicts (one pickle byte
    # each) is refused before it takes a gigabyte (2.2 GB before).
    path = os.path.join(tmp, "dicts.pickle.gz")
    open(path, "wb").write(gzip.compress(b"\x80\x02" + b"}" * 30000000 + b"."))
    p = subprocess.run(["python3", os.path.join(root, "scripts", "cupool-import-torch"), path,
                        "-o", os.path.join(tmp, "x.trace")], env=env, capture_output=True,
                       text=True, timeout=120)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    check("refuses 30 million empty dicts within 1 GiB", p.returncode == 1 and
          p.stderr.count("\n") == 1 and "memory" in p.stderr and peak < (1 << 30),
          f"peak {peak >> 20} MiB: {p.stderr[-300:]}")

    # Fuzzing: a few hundred mutants of the real snapshot (bytes flipped,
    # inserted, cut), loaded and converted in this process. Each must be
    # converted or refused with the importer's own message (SystemExit 1),
    # never another exception.
    import importlib.machinery
    import random
    mod = importlib.machinery.SourceFileLoader(
        "import_torch", os.path.join(root, "scripts", "cupool-import-torch")).load_module()
    good = gzip.decompress(open(os.path.join(data, "torch_snapshot.pickle.gz"), "rb").read())
    rng = random.Random(int(os.environ.get("FUZZ_SEED", "1")))
    iters = int(os.environ.get("FUZZ_ITERS", "300"))
    outcome = {"converted": 0, "refused": 0}
    bad_exc = []
    path = os.path.join(tmp, "mutant.pickle")
    sink = io.StringIO()
    for n in range(iters):
        b = bytearray(good)
        for _ in range(rng.randint(1, 8)):
            k = rng.randrange(len(b))
            what = rng.random()
            if what < 0.6:
                b[k] = rng.randrange(256)
            elif what < 0.8:
                b[k:k] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 9)))
            else:
                del b[k:k + rng.randint(1, 64)]
        if rng.random() < 0.3:
            b = gzip.compress(bytes(b))
        open(path, "wb").write(b)
        try:
            with contextlib.redirect_stderr(sink):
                mod.convert(mod.load(path))
            outcome["converted"] += 1
        except SystemExit as x:
            outcome["refused"] += 1
            if x.code != 1:
                bad_exc.append(f"mutant {n}: exit {x.code}")
        except Exception as x:  # anything else is a bug
            bad_exc.append(f"mutant {n}: {type(x).__name__}: {x}")
    check(f"fuzz: {iters} mutants, {outcome['converted']} converted, "
          f"{outcome['refused']} refused, none raised", not bad_exc, bad_exc[:3])

sys.exit(1 if failed else 0)
