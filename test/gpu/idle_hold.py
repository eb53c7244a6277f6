# SPDX-License-Identifier: Apache-2.0
"""idle_hold.py MODE: a PyTorch program (its caching allocator on) gone
idle with its cache full, for a flush from outside (scripts/gpu-idle).
It holds LIVE_MIB MiB (512) live in one tensor and has had GIB GiB (40)
more in 1 GiB tensors, freed since (PyTorch's cache keeps them); writes
one JSON line to $READY (pid, PyTorch's reserved and allocated bytes),
whole, through a rename; then blocks its main thread in MODE, the GIL
released, until SIGTERM:
  sleep select poll socket  time.sleep; select, poll on a pipe nobody
                            writes; recv on one end of a socketpair
  lock event queue join     threading.Lock acquired twice, Event.wait,
                            Queue.get, joining a sleeping thread
  input                     input() on a silent pipe
  asyncio                   an event loop awaiting a socket read (a server
                            between requests)
  jupyter                   a zmq poll on a PULL socket (an idle Jupyter
                            kernel); without zmq, {"skip": ...} in $READY
  loop                      a pure-Python busy loop (never blocked)
  none                      GIB taken as 0, then sleep: the live tensor and
                            the context alone (the reference)"""
import json
import os
import signal
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from blocking import MODES as BLOCKING, block  # noqa: E402

MODES = BLOCKING + ("jupyter", "none")
if len(sys.argv) != 2 or sys.argv[1] not in MODES:
    sys.exit(f"usage: idle_hold.py {'|'.join(MODES)}")
mode = sys.argv[1]


def ready(line):
    path = os.environ["READY"]
    with open(path + ".tmp", "w") as f:
        f.write(json.dumps(line) + "\n")
    os.rename(path + ".tmp", path)


if mode == "jupyter":
    try:
        import zmq
    except ImportError:
        ready({"skip": "no zmq"})
        sys.exit(0)

import torch  # noqa: E402 (after the skip, which needs no GPU)

gib = 0 if mode == "none" else int(os.environ.get("GIB", "40"))
live = torch.empty(int(os.environ.get("LIVE_MIB", "512")) << 20, dtype=torch.uint8,
                   device="cuda").fill_(1)
cached = [torch.empty(1 << 30, dtype=torch.uint8, device="cuda").fill_(1) for _ in range(gib)]
del cached
torch.cuda.synchronize()
# A Python handler runs only where the blocking call comes back to the
# interpreter on EINTR; join and zmq's poll may not (it depends on the
# Python and pyzmq versions), so there SIGTERM keeps its default action.
if mode not in ("join", "jupyter"):
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
ready({"pid": os.getpid(), "mode": mode, "reserved": torch.cuda.memory_reserved(),
       "allocated": torch.cuda.memory_allocated()})

if mode == "jupyter":
    ctx = zmq.Context()
    s = ctx.socket(zmq.PULL)
    s.bind_to_random_port("tcp://127.0.0.1")
    poller = zmq.Poller()
    poller.register(s, zmq.POLLIN)
    poller.poll()
    sys.exit("idle_hold.py jupyter: the poll returned")
block("sleep" if mode == "none" else mode)
