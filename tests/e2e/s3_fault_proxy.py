"""A small HTTP/1.1-aware TCP proxy on 127.0.0.1 that injects network faults
between Terrace and an S3 server (MinIO) for the object-tier fault tests
(docs/design.md §5n "Network faults").

    with FaultProxy(upstream_port) as proxy:      # listens on proxy.port
        rule = proxy.add(Fault("error", count=3, method="PUT", path="/seg-"))
        ...                                       # the next 3 matching requests get 503 SlowDown
        assert rule.fired == 3
        proxy.clear()                             # pass everything through again

Each request is matched against the rules in order; the first live rule
that matches (method, substring of the path without the query) applies to
it and counts down (`count=None`: every matching request until cleared).
Fault kinds:

  error           answer `status` (503) with an S3 XML error body `code`
                  (SlowDown; 500 InternalError ...) without asking upstream
  reset_request   read the head and half the body, forward them, then reset
                  both connections (RST) while the client may still be
                  sending: a request cut off mid-way
  reset_response  forward the request, then send the client the response
                  head and half its body (nothing if it has none: the
                  answer is lost after the server acted) and reset
  delay           forward, and hold the answer `delay` seconds
                  (math.inf: until `release()` or stop)
  stall           read the request and never answer (until the client
                  gives up, `release()` or stop)
  corrupt_response  flip one bit in the middle of the response body
  corrupt_request   flip one bit in the middle of the request body

`proxy.connect_delay` (seconds) delays every new connection before its
first request is read: latency per connection.

Nothing listens beyond 127.0.0.1. Every connection has its own thread;
`stop()` closes every socket. Bodies are read whole (objects in the tests are
at most 16 MiB). A kept-alive upstream connection the server closed while
idle is opened again once, silently: the proxy adds no fault of its own.
"""

from __future__ import annotations

import contextlib
import math
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Optional

HOST = "127.0.0.1"
KINDS = ("error", "reset_request", "reset_response", "delay", "stall",
         "corrupt_response", "corrupt_request")
REASONS = {500: "Internal Server Error", 503: "Service Unavailable", 429: "Too Many Requests"}


@dataclass
class Fault:
    """One rule; `fired` counts the requests it applied to, `answered` those
    of them the server answered (for faults that forward the request)."""
    kind: str
    count: Optional[int] = 1
    method: Optional[str] = None
    path: Optional[str] = None
    status: int = 503
    code: str = "SlowDown"
    delay: float = 0.0
    fired: int = 0
    answered: int = 0
    seen: list = field(default_factory=list)

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}; known: {KINDS}")

    def live(self) -> bool:
        return self.count is None or self.fired < self.count

    def matches(self, method: str, path: str) -> bool:
        return ((self.method is None or self.method == method)
                and (self.path is None or self.path in path.split("?", 1)[0]))


class Closed(Exception):
    """The peer closed the connection."""


class Conn:
    """A socket with a read buffer."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.buf = b""

    def _more(self) -> None:
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise Closed()
        self.buf += chunk

    def read_head(self) -> bytes:
        while b"\r\n\r\n" not in self.buf:
            if len(self.buf) > 1 << 20:
                raise ValueError("HTTP head too long")
            self._more()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        return head + b"\r\n\r\n"

    def read_exact(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._more()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_line(self) -> bytes:
        while b"\r\n" not in self.buf:
            self._more()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line + b"\r\n"

    def read_to_close(self) -> bytes:
        try:
            while True:
                self._more()
        except Closed:
            pass
        out, self.buf = self.buf, b""
        return out

    def read_body(self, headers: dict, *, none: bool = False) -> tuple[bytes, bytes]:
        """(raw body as on the wire, decoded payload)."""
        if none:
            return b"", b""
        if "chunked" in headers.get("transfer-encoding", "").lower():
            raw, payload = b"", b""
            while True:
                line = self.read_line()
                size = int(line.split(b";")[0].strip(), 16)
                raw += line
                if size == 0:
                    while True:  # trailers, then the empty line
                        t = self.read_line()
                        raw += t
                        if t == b"\r\n":
                            return raw, payload
                data = self.read_exact(size + 2)
                raw += data
                payload += data[:-2]
        if "content-length" in headers:
            b = self.read_exact(int(headers["content-length"]))
            return b, b
        return None, None  # until close (responses only)


def parse_head(head: bytes) -> tuple[str, dict]:
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    return lines[0], headers


def flip_middle(body: bytes) -> bytes:
    if not body:
        return body
    i = len(body) // 2
    return body[:i] + bytes([body[i] ^ 0x01]) + body[i + 1:]


def reset(sock: Optional[socket.socket]) -> None:
    """Close with RST (SO_LINGER 0)."""
    if sock is None:
        return
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


def error_response(status: int, code: str, path: str, n: int) -> bytes:
    body = ('<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Error><Code>{code}</Code><Message>injected by the fault proxy</Message>"
            f"<Resource>{path.split('?', 1)[0]}</Resource><RequestId>fault-proxy-{n}</RequestId>"
            "</Error>").encode()
    head = (f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}\r\n"
            "Content-Type: application/xml\r\n"
            f"Content-Length: {len(body)}\r\n"
            f"x-amz-request-id: fault-proxy-{n}\r\n"
            "\r\n").encode()
    return head + body


class FaultProxy:
    """See the module docs."""

    def __init__(self, upstream_port: int, upstream_host: str = HOST):
        self.upstream = (upstream_host, upstream_port)
        self.rules: list[Fault] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        # Bumped by release(): a hold or stall ends when it changes.
        self.release_gen = 0
        self.connect_delay = 0.0
        self.socks: set[socket.socket] = set()
        self.requests = 0
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind((HOST, 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self._accept, name="fault-proxy", daemon=True)

    # Control.

    def start(self) -> "FaultProxy":
        self.thread.start()
        return self

    def add(self, fault: Fault) -> Fault:
        with self.lock:
            self.rules.append(fault)
        return fault

    def clear(self) -> None:
        """Pass everything through again; held and stalled answers go on."""
        with self.lock:
            self.rules = []
        self.release()

    def release(self) -> None:
        """Lets held answers (delay=inf) go and ends stalls."""
        with self.lock:
            self.release_gen += 1

    def stop(self) -> None:
        self.stopping.set()
        # shutdown first: close() alone does not end the accept() another
        # thread is blocked in, and the socket then keeps listening (a
        # connection meant to be refused got accepted and timed out).
        for end in (lambda: self.listener.shutdown(socket.SHUT_RDWR), self.listener.close):
            try:
                end()
            except OSError:
                pass
        with self.lock:
            socks = list(self.socks)
        for s in socks:
            reset(s)
        self.thread.join(timeout=5)

    def __enter__(self) -> "FaultProxy":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # Serving.

    def _track(self, s: socket.socket) -> socket.socket:
        with self.lock:
            self.socks.add(s)
        return s

    def _untrack(self, s: Optional[socket.socket]) -> None:
        if s is None:
            return
        with self.lock:
            self.socks.discard(s)
        try:
            s.close()
        except OSError:
            pass

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                s, _ = self.listener.accept()
            except OSError:
                return
            self._track(s)
            threading.Thread(target=self._serve, args=(s,), daemon=True).start()

    def _rule_for(self, method: str, path: str) -> Optional[Fault]:
        with self.lock:
            self.requests += 1
            for r in self.rules:
                if r.live() and r.matches(method, path):
                    r.fired += 1
                    r.seen.append(f"{method} {path}")
                    return r
        return None

    def _held(self, gen: int) -> bool:
        return not self.stopping.is_set() and self.release_gen == gen

    def _wait(self, seconds: float) -> None:
        """Sleeps `seconds` (inf: until released), or until stop."""
        gen = self.release_gen
        end = time.monotonic() + seconds
        while self._held(gen) and time.monotonic() < end:
            time.sleep(min(end - time.monotonic(), 0.02) if seconds != math.inf else 0.02)

    def _stall(self, client: socket.socket) -> None:
        """Never answer: wait until the client gives up, release or stop."""
        gen = self.release_gen
        client.settimeout(0.02)
        while self._held(gen):
            try:
                if not client.recv(1 << 16):
                    return
            except socket.timeout:
                continue
            except OSError:
                return

    def _upstream(self) -> Conn:
        s = self._track(socket.create_connection(self.upstream, timeout=10))
        s.settimeout(None)
        return Conn(s)

    def _exchange(self, up: Conn, data: bytes, method: str):
        """Sends a request upstream and reads the answer: (head, status
        line, headers, raw body, close after)."""
        up.sock.sendall(data)
        rhead = up.read_head()
        rline, rheaders = parse_head(rhead)
        status = int(rline.split(" ")[1])
        no_body = method == "HEAD" or status in (204, 304) or 100 <= status < 200
        rraw, _ = up.read_body(rheaders, none=no_body)
        close_after = rraw is None or rheaders.get("connection", "").lower() == "close"
        if rraw is None:
            rraw = up.read_to_close()
        return rhead, rheaders, rraw, close_after

    def _serve(self, client_sock: socket.socket) -> None:
        if self.connect_delay:
            self._wait(self.connect_delay)
        client = Conn(client_sock)
        up: Optional[Conn] = None
        try:
            while not self.stopping.is_set():
                try:
                    head = client.read_head()
                except (Closed, OSError):
                    return
                line, headers = parse_head(head)
                method, path = line.split(" ")[0], line.split(" ")[1]
                rule = self._rule_for(method, path)
                kind = rule.kind if rule else None
                if kind == "reset_request":
                    # Half the body (as far as the client sent it), then RST
                    # while the client may still be sending.
                    half = int(headers.get("content-length", "0")) // 2
                    part = client.read_exact(half)
                    with contextlib.suppress(OSError):
                        up = up or self._upstream()
                        up.sock.sendall(head + part)
                    reset(up.sock if up else None)
                    reset(client_sock)
                    return
                raw, body = client.read_body(headers)
                if raw is None:
                    raw = body = b""
                if kind == "error":
                    client_sock.sendall(error_response(rule.status, rule.code, path, rule.fired))
                    continue
                if kind == "stall":
                    self._stall(client_sock)
                    return
                if kind == "corrupt_request" and body and raw == body:
                    raw = flip_middle(raw)
                reused = up is not None
                try:
                    if up is None:
                        up = self._upstream()
                    try:
                        rhead, rheaders, rraw, close_after = self._exchange(up, head + raw, method)
                    except (Closed, OSError):
                        if not reused:
                            raise
                        # The server closed the idle connection: once more on a new one.
                        self._untrack(up.sock)
                        up = self._upstream()
                        rhead, rheaders, rraw, close_after = self._exchange(up, head + raw, method)
                except (Closed, OSError):
                    # Nobody upstream, or it went away mid-request (MinIO
                    # killed): the client sees its connection reset.
                    reset(client_sock)
                    return
                if rule is not None:
                    with self.lock:
                        rule.answered += 1
                if kind == "delay":
                    self._wait(rule.delay)
                if kind == "reset_response":
                    if rraw:
                        client_sock.sendall(rhead + rraw[: len(rraw) // 2])
                    reset(up.sock)
                    reset(client_sock)
                    return
                if kind == "corrupt_response" and rraw and "chunked" not in rheaders.get(
                        "transfer-encoding", ""):
                    rraw = flip_middle(rraw)
                client_sock.sendall(rhead + rraw)
                if close_after:
                    return
        except OSError:
            return
        finally:
            self._untrack(client_sock)
            if up is not None:
                self._untrack(up.sock)


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description="pass-through S3 fault proxy on 127.0.0.1 "
                                             "(faults are added from Python: see the module docs)")
    ap.add_argument("upstream_port", type=int)
    a = ap.parse_args()
    with FaultProxy(a.upstream_port) as p:
        print(f"listening on {HOST}:{p.port} -> {HOST}:{a.upstream_port}", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
