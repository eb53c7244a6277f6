"""cupool import-torch on a snapshot recorded on an H200 by
test/gpu/torch_snapshot.py (test/data/torch_snapshot.pickle.gz), checked
against what the snapshot's *segment state* says (independent of the trace
the importer reads) and against PyTorch's own figures at that moment
(test/data/torch_snapshot.json); then its refusals of bad input.
Usage: test_import_torch.py BUILD_DIR"""
import gzip
import json
import os
import pickle
import subprocess
import sys
import tempfile

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

sys.exit(1 if failed else 0)
