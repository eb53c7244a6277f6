# SPDX-License-Identifier: Apache-2.0
"""fw_judge.py one|ddp OUT [RC]: the rows of scripts/gpu-framework, from the
logs it left in OUT (see there)."""
import json
import statistics
import sys


def records(path):
    """The JSON lines of a log (a program prints other lines too)."""
    try:
        return [json.loads(l) for l in open(path) if l.startswith("{")]
    except OSError:
        return []


def ranks(path):
    return {d["rank"]: d for d in records(path)}


def with_pause(fl, runs):
    """Each flush record with its rank's pause as the program reported it
    at the end (reserved_after is measured after the flush)."""
    for f in fl:
        f["pause"] = runs[f["rank"]]["pause"]
    return fl


def seen(f):
    """The first sample of nvidia-smi at or under the bound, in ms after
    the request, or -1. The bound: what PyTorch still reserves after its own
    empty_cache (segments that hold live tensors: its live bytes alone no
    allocator could reach without moving them) plus what lies outside the
    pool (context, libraries), plus 5%."""
    return next((t for t, u in f["samples"] if u <= bound(f)), -1)


def outside(f):
    return f["used_after_mib"] - f["pool_reserved_after_mib"]


def bound(f):
    return 1.05 * ((f["pause"]["reserved_after"] >> 20) + outside(f))


def describe(f):
    return (f"nvidia-smi {f['used_before_mib']} -> {f['used_after_mib']} MiB, at the bound "
            f"{seen(f)} ms after the request (bound {bound(f):.0f}: PyTorch keeps "
            f"{f['pause']['reserved_after'] >> 20} MiB of segments holding its "
            f"{f['live_mib']} MiB live; outside the pool {outside(f)})")


def first_difference(a, b):
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)


def view(out, tag, rank, pause):
    """fw_view: cupool stat --json before the flush carried PyTorch's own
    figures, equal to what the paused program read itself."""
    try:
        d = json.loads(open(f"{out}/{tag}.stat_json.{rank}").read())
        dev = d["devices"][0]
        got = (dev["framework_reserved"], dev["framework_allocated"])
    except (OSError, ValueError, KeyError, IndexError) as e:
        print(f"fw_view FAIL no figures: {e}")
        return
    want = (pause["reserved_before"], pause["live"])
    table = open(f"{out}/{tag}.stat.{rank}").read().splitlines()
    line = next((l.strip() for l in table if "PyTorch" in l), "no PyTorch line")
    print(f"fw_view {'PASS' if got == want else 'FAIL'} cupool stat: {line} "
          f"(program's own: reserved {want[0]}, allocated {want[1]}; stat's {got})")


def one(out):
    ref, run = ranks(f"{out}/ref.json").get(0), ranks(f"{out}/one.json").get(0)
    fl = records(f"{out}/one.flush.jsonl")
    if not (ref and run and fl):
        print("fw_flush FAIL a run did not finish (see the logs)")
        return
    f = with_pause(fl, {0: run})[0]
    ok = 0 <= seen(f) <= 1000
    print(f"fw_flush {'PASS' if ok else 'FAIL'} {describe(f)}; answer: "
          f"{f['answer'].strip()[:200]}")
    view(out, "one", 0, run["pause"])
    d = first_difference(ref["losses"], run["losses"])
    ref2 = ranks(f"{out}/ref2.json").get(0)
    c = first_difference(ref["losses"], ref2["losses"]) if ref2 else "no control run"
    print(f"fw_losses {'PASS' if d is None else 'FAIL'} {len(run['losses'])} losses "
          f"{'equal bit for bit' if d is None else f'differ from step {d}'} to the run "
          f"without the flush (paused at step {f['pause']['step']}); two runs without it: "
          f"{'equal' if c is None else f'differ from step {c}'}")


def ddp(out, rc):
    plain, ref, run = (ranks(f"{out}/{n}.json") for n in ("ddp_plain", "ddp_ref", "ddp"))
    fl = records(f"{out}/ddp.flush.jsonl")
    if rc != 0 or len(run) != 2 or len(fl) != 2 or len(plain) != 2 or len(ref) != 2:
        print(f"fw_ddp FAIL exit {rc}, {len(run)} ranks finished (see the logs)")
        return
    with_pause(fl, run)
    at = fl[0]["pause"]["step"]
    after = lambda d: statistics.median(d["times"][at + 2:])
    ratio = max(after(run[r]) / after(plain[r]) for r in (0, 1))
    diffs = [first_difference(ref[r]["losses"], run[r]["losses"]) for r in (0, 1)]
    ok = all(0 <= seen(f) <= 1000 for f in fl) and diffs == [None, None] and ratio <= 1.01
    print(f"fw_ddp {'PASS' if ok else 'FAIL'} "
          + "; ".join(f"rank {f['rank']}: {describe(f)}" for f in fl)
          + f"; losses {'equal' if diffs == [None, None] else f'differ from steps {diffs}'}"
          f"; step time after the next step {ratio:.3f}x plain PyTorch's")


def cap(out, gib):
    n = json.load(open(f"{out}/cap_native.peak.json"))
    c = json.load(open(f"{out}/cap_cupool.peak.json"))
    rn, rc = ranks(f"{out}/cap_native.json").get(0), ranks(f"{out}/cap_cupool.json").get(0)
    limit = gib * 1024 + max(c["outside_mib"], 0)
    ok = n["exit"] == c["exit"] and c["outside_mib"] >= 0 and c["peak_used_mib"] <= limit
    same = rn and rc and rn["losses"] == rc["losses"]
    print(f"fw_cap {'PASS' if ok and same else 'FAIL'} cap {gib} GiB: native (PyTorch's "
          f"fraction) exit {n['exit']}, nvidia-smi peak {n['peak_used_mib']} MiB; cupool "
          f"(--max-reserved) exit {c['exit']}, peak {c['peak_used_mib']} MiB (cap + outside "
          f"the pool {c['outside_mib']} = {limit}); losses {'equal' if same else 'differ'}; "
          f"PyTorch's peak reserved native {rn and rn['peak_reserved'] >> 20}, under cupool "
          f"{rc and rc['peak_reserved'] >> 20} MiB")


if __name__ == "__main__":
    if sys.argv[1] == "cap":
        cap(sys.argv[2], int(sys.argv[3]))
    elif sys.argv[1] == "one":
        one(sys.argv[2])
    else:
        ddp(sys.argv[2], int(sys.argv[3]))
