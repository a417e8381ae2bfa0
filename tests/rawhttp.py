"""Raw HTTP/1.1 for the tests' own servers: reading one request off a socket, a server that
trickles its reply, one that hangs watches and one that hangs lists."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from typing import Self


def read_request(conn: socket.socket) -> bytes:
    """The head and the ``Content-Length`` body of the next request on ``conn`` (less when the
    peer closes first). The serving thread's."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


class TricklingServer:
    """Answers its first connection's request with ``body`` (JSON), sent one byte every
    ``pace`` seconds (each wait far shorter than a client's timeout) until the client hangs
    up; ``hung_up`` is set then. Any later connection gets the same reply at once. Use as a
    context manager: leaving it stops the server and joins its thread."""

    def __init__(self, body: bytes, pace: float = 0.05) -> None:
        self.body, self.pace = body, pace
        self.hung_up = threading.Event()
        self._stop = threading.Event()
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._thread = threading.Thread(target=self._serve, name="trickling-http")
        self._thread.start()

    def _serve(self) -> None:
        head = (
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
            f"Content-Length: {len(self.body)}\r\n\r\n"
        ).encode()
        first = True
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            with conn:
                read_request(conn)
                conn.sendall(head)
                if not first:
                    conn.sendall(self.body)
                    continue
                first = False
                try:
                    for i in range(len(self.body)):
                        if self._stop.wait(self.pace):  # a slow server's pace, not a sync
                            return
                        conn.sendall(self.body[i : i + 1])
                except OSError:  # the client closed the connection mid-body
                    self.hung_up.set()

    def __enter__(self) -> TricklingServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        self._thread.join(5)


def json_reply(body: bytes) -> bytes:
    """A whole ``200`` reply carrying the JSON ``body``."""
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        + b"Content-Length: %d\r\n\r\n" % len(body)
        + body
    )


class ConnectionServer:
    """A test server answering each connection on a thread of its own (:meth:`_answer`). A
    context manager: leaving it stops the server and joins its threads."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._stop = threading.Event()
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._threads = [threading.Thread(target=self._serve, name=f"{name}-http")]
        self._threads[0].start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            thread = threading.Thread(target=self._answer, args=(conn,), name=f"{self._name}-conn")
            self._threads.append(thread)
            thread.start()

    def _answer(self, conn: socket.socket) -> None:
        raise NotImplementedError

    def _hold(self, conn: socket.socket) -> None:
        """Keep ``conn`` open, silent, until the client hangs up or the server closes."""
        conn.settimeout(0.05)
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                if not conn.recv(1):
                    return

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        for thread in list(self._threads):
            thread.join(5)


class SilentWatchServer(ConnectionServer):
    """An apiserver that hangs watches: a list gets an empty ``PodList`` at once; a watch
    request is read and never answered (no head) until the client hangs up or the server
    closes; ``watching`` is set when one arrives. With ``head=True`` a watch gets its reply's
    head (a chunked 200) and then nothing, whatever its ``timeoutSeconds``; ``heads`` holds
    the ``time.monotonic()`` just before each head was sent."""

    LISTED = b'{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[]}'

    def __init__(self, head: bool = False) -> None:
        self.head = head
        self.heads: list[float] = []
        self.watching = threading.Event()
        super().__init__("silent-watch")

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            while not self._stop.is_set():
                head = read_request(conn)
                if not head:
                    return  # the client closed the connection
                if b"watch=true" not in head.split(b"\r\n", 1)[0]:
                    conn.sendall(json_reply(self.LISTED))
                    continue
                self.watching.set()
                if self.head:
                    self.heads.append(time.monotonic())
                    conn.sendall(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        b"Transfer-Encoding: chunked\r\n\r\n"
                    )
                self._hold(conn)  # the watch, until either side gives up
                return


class HungListServer(ConnectionServer):
    """An apiserver that hangs lists: a request is read and left unanswered until ``release``
    is set, then answered with a ``PodList`` of one pod (``late``); ``listing`` is set when a
    request arrives, ``answered`` once a reply went out. The connection is held until the
    client hangs up or the server closes."""

    BODY = (
        b'{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"5"},'
        b'"items":[{"metadata":{"name":"late","namespace":"default","uid":"u-late",'
        b'"resourceVersion":"5"},"spec":{}}]}'
    )

    def __init__(self) -> None:
        self.listing = threading.Event()
        self.release = threading.Event()
        self.answered = threading.Event()
        super().__init__("hung-list")

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            if not read_request(conn):
                return
            self.listing.set()
            while not (self.release.wait(0.05) or self._stop.is_set()):
                pass  # a hung apiserver, until released or closed
            with contextlib.suppress(OSError):
                conn.sendall(json_reply(self.BODY))
                self.answered.set()
                self._hold(conn)
