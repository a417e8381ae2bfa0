"""A binding that lands while the client never hears back, on the real apiserver (and the
emulator): the call reads the pod once before it gives up, and resolves ``SUCCESS``.

The client talks to the apiserver through :class:`LosingProxy`, a loopback HTTP proxy that
forwards every request and returns every answer, except the bindings' answers: those it
either never sends, ending the connection (``cut``: a connection lost after the request was
sent), or holds until the client's request timeout fired and the client went away (``hold``:
a client-side timeout shorter than the server's answer). Every binding attempt therefore
reaches the server and goes unanswered: the first lands, the retries meet "already bound" on
the server; the client sees only timeouts or cut connections. The pod's GET passes.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import pytest
from prometheus_client import CollectorRegistry

from kdispatch.actors.facade.dispatcher import Dispatcher
from kdispatch.actors.model.config import DispatcherConfig, RetryConfig
from kdispatch.actors.model.errors import Outcome
from kdispatch.actors.model.pod_calls import PodBinding
from kdispatch.adapters.kubernetes import KubernetesBackend
from tests.realapi.cluster import Admin, Target
from tests.realapi.conftest import SHARED_NODES
from tests.realapi.objects import new_pod

pytestmark = pytest.mark.timeout(60)

ATTEMPTS = 3


class LosingProxy:
    """A loopback HTTP proxy in front of ``upstream`` that loses the answers of the bindings
    (``mode``: ``cut`` or ``hold``, see the module docstring). ``lost`` counts them. The
    requests go upstream one connection each; the answers go back in one write each."""

    def __init__(self, upstream: str, ca_cert: str | None, mode: str) -> None:
        parts = urlsplit(upstream)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port
        self.tls = parts.scheme == "https"
        self.context = ssl.create_default_context(cafile=ca_cert) if self.tls else None
        self.mode = mode
        self.lost = 0
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()  # client connections being served
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                del format, args

            def setup(self) -> None:
                super().setup()
                with proxy._lock:
                    proxy._open.add(self.connection)

            def finish(self) -> None:
                with proxy._lock:
                    proxy._open.discard(self.connection)
                super().finish()

            def _forward(self) -> None:
                proxy.forward(self)

            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _forward

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = False  # server_close joins them (the client closed first)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(
            target=self.server.serve_forever, name="losing-proxy", daemon=True
        )

    def __enter__(self) -> LosingProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        with self._lock:  # a kept-alive connection left open by a pool: end it
            for sock in self._open:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
        self.server.server_close()  # joins the handler threads
        self._thread.join(10)

    def forward(self, handler: BaseHTTPRequestHandler) -> None:
        """A proxy thread: one request upstream, its answer back (or lost)."""
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else None
        skip = {"host", "connection", "keep-alive", "content-length"}
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in skip}
        conn: http.client.HTTPConnection = (
            http.client.HTTPSConnection(self.host, self.port, context=self.context, timeout=30)
            if self.tls
            else http.client.HTTPConnection(self.host, self.port, timeout=30)
        )
        try:
            conn.request(handler.command, handler.path, body=body, headers=headers)
            reply = conn.getresponse()
            data = reply.read()
        finally:
            conn.close()
        if handler.command == "POST" and handler.path.split("?")[0].endswith("/binding"):
            with self._lock:
                self.lost += 1
            if self.mode == "hold":  # until the client gave up waiting and closed
                handler.connection.settimeout(30)
                try:
                    while handler.connection.recv(4096):
                        pass
                except OSError:
                    pass
            handler.close_connection = True
            return  # the server applied it (or answered); the client hears nothing
        drop = {"transfer-encoding", "connection", "content-length", "keep-alive"}
        lines = [f"HTTP/1.1 {reply.status} {reply.reason}"]
        lines += [f"{k}: {v}" for k, v in reply.getheaders() if k.lower() not in drop]
        lines += [f"Content-Length: {len(data)}", "Connection: keep-alive", "", ""]
        handler.wfile.write("\r\n".join(lines).encode("latin-1") + data)
        handler.wfile.flush()


@pytest.fixture(params=["cut", "hold"])
def proxy(request: pytest.FixtureRequest, target: Target) -> Iterator[LosingProxy]:
    with LosingProxy(target.url, target.ca_cert, request.param) as p:
        yield p


def test_binding_that_landed_unanswered_resolves_success(
    target: Target, admin: Admin, ns: str, proxy: LosingProxy
) -> None:
    pod = new_pod(admin, ns, "p1")
    node = SHARED_NODES[0]
    # "hold": the client's request timeout (1 s) is shorter than the answer, which never comes
    timeout = 1.0 if proxy.mode == "hold" else 10.0
    config = DispatcherConfig(
        retry=RetryConfig(max_attempts=ATTEMPTS, base_backoff=0.01, max_backoff=0.01)
    )
    with (
        KubernetesBackend.for_url(
            proxy.url, token=target.admin_token, request_timeout=timeout
        ) as backend,
        Dispatcher(backend, config, metrics_registry=CollectorRegistry()) as d,
    ):
        future = d.submit(PodBinding.for_pod(pod, node))
        assert future.result(timeout=45) is Outcome.SUCCESS
        stats = d.stats()
    assert proxy.lost == ATTEMPTS  # every attempt reached the server, none was answered
    assert stats["sent"] == {"pod_binding": ATTEMPTS + 1}  # the attempts and one read
    reason = "connection" if proxy.mode == "cut" else "timeout"
    assert stats["retries"] == {f"pod_binding:{reason}": ATTEMPTS}
    assert admin.get_pod(ns, "p1")["spec"]["nodeName"] == node
