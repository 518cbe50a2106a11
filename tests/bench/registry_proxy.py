#!/usr/bin/env python3
"""The test registry (127.0.0.1:5000) behind a proxy that forwards, hangs or refuses.

    registry_proxy.py MODE_FILE PORT_FILE STATS_FILE

Writes the port it listens on (127.0.0.1, any free port) to PORT_FILE. Its mode is the
content of MODE_FILE, read every 20 ms, and applies to every connection, open or new:

  forward  bytes flow both ways.
  hang     no byte moves on any connection: new ones are accepted and held, and a request
           sent on a connection already open (a client's kept-alive connection, which is
           how pilotd's freshness check reuses its connection) waits exactly as one on a
           fresh connection does; a response on its way is held too. Back to forward, the
           held bytes go on.
  down     every connection is reset, open or new (a registry that is gone).

STATS_FILE is rewritten (atomically) at every change, one line:
  "mode M requests N pending P hung H"
N: requests received in all; P: requests received and not answered yet (during a hang,
the requests hanging now); H: requests that a hang held (pending when it began, or sent
during it), in all. Requests are counted by their HTTP/1 request lines and answered by
the response status lines that reach the client (no pipelining: one of each per exchange).
"""
import os
import re
import select
import socket
import sys
import threading
import time

mode_file, port_file, stats_file = sys.argv[1:4]
REQUEST = re.compile(rb"(?:GET|HEAD|POST|PUT|PATCH|DELETE|OPTIONS) \S+ HTTP/1\.[01]\r\n")
RESPONSE = re.compile(rb"HTTP/1\.[01] \d{3} ")

lock = threading.Condition()
state = {"mode": "forward", "requests": 0, "pending": 0, "hung": 0}
conns = set()  # every open Conn


class Conn:
    def __init__(self, client, upstream):
        self.client, self.upstream = client, upstream
        self.pending = 0  # its requests not answered yet
        self.closed = False


def write_stats():  # with lock held
    tmp = stats_file + ".tmp"
    with open(tmp, "w") as f:
        f.write("mode {mode} requests {requests} pending {pending} hung {hung}\n".format(**state))
    os.replace(tmp, stats_file)


def reset(s):
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
        s.shutdown(socket.SHUT_RDWR)  # wakes the pipe blocked in recv; its close then resets
    except OSError:
        pass


def gone(s):
    """The client closed its end (a request it gave up on is no longer in flight)."""
    try:
        r, _, _ = select.select([s], [], [], 0)
        return bool(r) and s.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


def close(conn):  # with lock held: its unanswered requests are in flight no more
    if conn.closed:
        return
    conn.closed = True
    conns.discard(conn)
    state["pending"] -= conn.pending
    conn.pending = 0
    write_stats()
    for s in (conn.client, conn.upstream):
        if state["mode"] == "down":
            reset(s)
        else:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def pipe(conn, to_upstream):
    a, b = (conn.client, conn.upstream) if to_upstream else (conn.upstream, conn.client)
    try:
        while data := a.recv(65536):
            with lock:
                if to_upstream:
                    n = len(REQUEST.findall(data))
                    state["requests"] += n
                    state["pending"] += n
                    conn.pending += n
                    if state["mode"] == "hang":
                        state["hung"] += n
                    if n:
                        write_stats()
                while state["mode"] == "hang" and not conn.closed:
                    lock.wait(0.05)
                    # (the other direction's pipe is in recv on the client: it sees a close)
                    if to_upstream and gone(conn.client):
                        close(conn)
                if state["mode"] == "down" or conn.closed:
                    break
                if not to_upstream:
                    # Answered once passed on (counted first: the client may look at once).
                    n = min(len(RESPONSE.findall(data)), conn.pending)
                    if n:
                        conn.pending -= n
                        state["pending"] -= n
                        write_stats()
            b.sendall(data)
    except OSError:
        pass
    with lock:
        close(conn)
    a.close()


def watch_mode():
    while True:
        try:
            mode = open(mode_file).read().strip() or "forward"
        except OSError:
            mode = "forward"
        with lock:
            if mode != state["mode"]:
                if mode == "hang":
                    state["hung"] += state["pending"]
                state["mode"] = mode
                write_stats()
                lock.notify_all()
                if mode == "down":
                    for conn in list(conns):
                        reset(conn.client)
                        reset(conn.upstream)
        time.sleep(0.02)


srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", 0))
srv.listen(64)
with lock:
    write_stats()
threading.Thread(target=watch_mode, daemon=True).start()
with open(port_file + ".tmp", "w") as f:
    f.write(str(srv.getsockname()[1]))
os.replace(port_file + ".tmp", port_file)
while True:
    c, _ = srv.accept()
    with lock:
        mode = state["mode"]
    if mode == "down":
        reset(c)
        c.close()
        continue
    try:
        u = socket.create_connection(("127.0.0.1", 5000))
    except OSError:
        reset(c)
        c.close()
        continue
    conn = Conn(c, u)
    with lock:
        conns.add(conn)
    threading.Thread(target=pipe, args=(conn, True), daemon=True).start()
    threading.Thread(target=pipe, args=(conn, False), daemon=True).start()
