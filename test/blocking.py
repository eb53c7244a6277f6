# SPDX-License-Identifier: Apache-2.0
"""The ways an idle Python program's main thread waits, for the flush
tests (test/fw_prog.py on the simulated runtime, test/gpu/idle_hold.py on
a GPU). block(MODE) does not return: it ends with the program (SIGTERM),
or with an exception a signal handler raises."""
import asyncio
import os
import queue
import select
import socket
import threading
import time

MODES = ("sleep", "select", "poll", "socket", "lock", "event", "queue", "join", "input",
         "asyncio", "loop")


def block(mode):
    """Blocks the calling (main) thread in mode: every mode but loop in one
    call that lets go of the interpreter's lock; loop runs pure Python that
    never sleeps."""
    r, w = os.pipe()  # w stays open and silent: r never reads
    a, b = socket.socketpair()
    if mode == "sleep":
        while True:
            time.sleep(3600)
    elif mode == "select":
        select.select([r], [], [])
    elif mode == "poll":
        p = select.poll()
        p.register(r, select.POLLIN)
        p.poll()
    elif mode == "socket":
        a.recv(1)
    elif mode == "lock":
        lk = threading.Lock()
        lk.acquire()
        lk.acquire()
    elif mode == "event":
        threading.Event().wait()
    elif mode == "queue":
        queue.Queue().get()
    elif mode == "join":
        t = threading.Thread(target=threading.Event().wait, daemon=True)
        t.start()
        t.join()
    elif mode == "input":
        os.dup2(r, 0)  # a terminal nobody types at
        input()
    elif mode == "asyncio":
        async def serve():  # a server between requests
            await asyncio.get_running_loop().sock_recv(a, 1)
        a.setblocking(False)
        asyncio.run(serve())
    elif mode == "loop":
        while True:
            sum(range(100))
    raise RuntimeError(f"block({mode}): the blocking call returned")
