"""A counting TCP relay between Floe and the origin: the origin's request log for tests.

It counts every byte Floe sends to the origin (so a test can prove nothing arrived), can cut
the next response mid-stream with a TCP reset (origin killed mid-GET), can stall every Nth
matching request (a slow origin connection), and can go down entirely (origin unreachable:
connection refused).
"""
import collections
import re
import socket
import struct
import threading
import time


class Relay:
    def __init__(self, upstream_port, host="127.0.0.1", bind="127.0.0.1"):
        self.upstream = (host, upstream_port)
        self.bind = bind
        self.lock = threading.Lock()
        self.bytes_to_origin = 0
        self.bytes_from_origin = 0  # every byte the origin answered (headers included)
        self.requests = collections.Counter()  # request lines toward the origin, by method
        self.lines = []  # (method, target) of each request line toward the origin, in order
        self.traceparents = []  # the traceparent header of each request toward the origin that had one
        self.cut_after = None  # cut the next response after this many bytes
        self.delay = 0  # seconds added before each request is forwarded (origin latency)
        # Answered 503 here (an origin refusing writes): a method ("PUT"), or a method and a
        # target prefix ("PUT /bucket/staged/").
        self.refuse = set()
        # Every `slow_every`-th request whose line starts with `slow_prefix` is held `slow_for`
        # seconds before it is forwarded (a stalled origin connection); `slowed` counts them.
        self.slow_prefix, self.slow_every, self.slow_for, self.slow_seen, self.slowed = None, 0, 0.0, 0, 0
        # Requests whose line starts with this are taken and never answered nor forwarded (a
        # silent origin: the connection stays open, nothing happens at the origin).
        self.silent = None
        self.conns = set()
        self.listener = None
        self.port = None
        self.start()

    def start(self, port=0):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((self.bind, port or self.port or 0))
        s.listen(128)
        self.listener = s
        self.port = s.getsockname()[1]
        threading.Thread(target=self._accept, args=(s,), daemon=True).start()

    def _refused(self, method, target):
        line = f"{method} {target}"
        return any(r == method or (" " in r and line.startswith(r)) for r in self.refuse)

    def down(self):
        """Refuse new connections and reset the open ones."""
        if self.listener:
            try:
                self.listener.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked in accept()
            except OSError:
                pass
            self.listener.close()
            self.listener = None
        with self.lock:
            conns = list(self.conns)
            self.conns.clear()
        for c in conns:
            _reset(c)

    def up(self):
        if not self.listener:
            self.start(self.port)

    def sent(self):
        with self.lock:
            return self.bytes_to_origin

    def received(self):
        with self.lock:
            return self.bytes_from_origin

    def count(self, method):
        with self.lock:
            return self.requests[method]

    def slow(self, prefix, every, seconds):
        with self.lock:
            self.slow_prefix, self.slow_every, self.slow_for, self.slow_seen = prefix, every, seconds, 0

    def cut_next_response(self, after_bytes):
        with self.lock:
            self.cut_after = after_bytes

    def _accept(self, listener):
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                origin = socket.create_connection(self.upstream)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.conns.update((client, origin))
            threading.Thread(target=self._pump, args=(client, origin, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(origin, client, False), daemon=True).start()

    def _pump(self, src, dst, to_origin):
        budget, swallow = None, False
        while True:
            stall = 0
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            if not data:
                for s in (src, dst):
                    try:
                        s.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                return
            with self.lock:
                if to_origin:
                    self.bytes_to_origin += len(data)
                    m = REQUEST_LINE.match(data)
                    if m:
                        self.requests[m.group(1).decode()] += 1
                        self.lines.append((m.group(1).decode(), m.group(2).decode()))
                        tp = TRACEPARENT.search(data)
                        if tp:
                            self.traceparents.append(tp.group(1).decode())
                        line = f"{m.group(1).decode()} {m.group(2).decode()}"
                        swallow = swallow or bool(self.silent and line.startswith(self.silent))
                        if self.slow_prefix and line.startswith(self.slow_prefix):
                            self.slow_seen += 1
                            if self.slow_seen % self.slow_every == 0:
                                stall, self.slowed = self.slow_for, self.slowed + 1
                else:
                    self.bytes_from_origin += len(data)
                    if budget is None and self.cut_after is not None:
                        budget, self.cut_after = self.cut_after, None
            if swallow:
                continue  # taken, never forwarded: the origin never hears of it
            if to_origin and m and self._refused(m.group(1).decode(), m.group(2).decode()):
                try:
                    src.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                except OSError:
                    pass
                _reset(src)
                _reset(dst)
                return
            if to_origin and m and self.delay:
                time.sleep(self.delay)  # simulated origin latency, not synchronisation
            if stall:
                time.sleep(stall)  # a stalled origin connection (the fault), not synchronisation
            if budget is not None and not to_origin:
                if len(data) >= budget:
                    try:
                        dst.sendall(data[:budget])
                    except OSError:
                        pass
                    _reset(src)
                    _reset(dst)
                    return
                budget -= len(data)
            try:
                dst.sendall(data)
            except OSError:
                return


REQUEST_LINE = re.compile(rb"^(GET|HEAD|PUT|POST|DELETE) (/\S*)")
TRACEPARENT = re.compile(rb"(?im)^traceparent:\s*(\S+)\r?$")


def _reset(sock):
    """Aborts a connection. shutdown() first: close() alone does not wake a thread blocked in
    recv() on the same socket, and the peer would never notice."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass
