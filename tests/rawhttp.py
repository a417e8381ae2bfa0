"""Reading one HTTP/1.1 request off a socket, for the tests' canned-reply servers."""

from __future__ import annotations

import socket


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
