"""``ApiServerHTTP``: the in-memory apiserver served over the real Kubernetes REST paths.

Tests drive it with the official ``kubernetes`` client, so the HTTP, serialization and error
paths of :class:`kdispatch.adapters.kubernetes.KubernetesBackend` and of the informers run for real.

Served (JSON only), for every kind of the kind table (:mod:`kdispatch.actors.model.kinds`: the
built-ins and any registered CRD), under ``/api/v1`` or ``/apis/{group}/{version}``,
namespaced (``.../namespaces/{ns}/{plural}``) or cluster-scoped (``.../{plural}``)::

    GET    .../{plural}                       list (labelSelector, fieldSelector, limit,
                                              continue) / watch (?watch=true, same selectors)
    POST   .../{plural}                       create (the server sets uid, and the name from
                                              metadata.generateName when there is none; a pod
                                              gets a Pending status and the default
                                              schedulerName, a ResourceClaim an empty status)
    GET    .../{plural}/{name}[/status]       get
    PUT    .../{plural}/{name}                replace (resourceVersion precondition)
    PATCH  .../{plural}/{name}[/status]       strategic-merge, merge or JSON patch
    DELETE .../{plural}/{name}                delete (DeleteOptions: preconditions uid and
                                              resourceVersion, gracePeriodSeconds); an object
                                              with finalizers is marked, not removed
    POST   .../pods/{name}/binding            v1 Binding → Status 201
    POST   .../pods/{name}/eviction           policy/v1 Eviction → Status 201, or 429 when a
                                              PodDisruptionBudget forbids it
    GET    /api, /api/v1, /apis, /apis/{group}/{version}    discovery documents of the table
    GET    /version                           the version it emulates (:data:`VERSION`)

A kind-specific store (for example for Leases) plugs in with ``stores={"Lease": store}``: the
requests for that kind go to ``store``, which offers the same generic methods as
:class:`InMemoryApiServer` (``get``, ``list``, ``watch``, ``create``, ``update``,
``patch``, ``patch_status``, ``delete``, ``get_object``).

Behaviour follows the real apiserver where the client can see it: lists answer ``<Kind>List``
with ``metadata.resourceVersion`` and items without ``kind``/``apiVersion``; watches
(``?watch=true``, ``resourceVersion``, ``timeoutSeconds``) stream chunked JSON lines and report
a too-old resourceVersion as an ``ERROR`` event carrying ``Status{code: 410, reason: Expired}``;
a watch without a resourceVersion (or from ``0``) starts with synthetic ``ADDED`` events, and
with ``allowWatchBookmarks=true`` a ``BOOKMARK`` annotated ``k8s.io/initial-events-end`` after
them; ``metadata.uid`` and
``metadata.resourceVersion`` in a patch body, ``metadata.uid`` in a Binding and
``preconditions.uid`` in DeleteOptions are preconditions; errors are ``Status`` objects with
the upstream code and reason, and a 429 carries ``Retry-After``.

Faults injected by the in-memory server become transport behaviour, so that the client raises
the error the server raised directly (with the same ``retry_after``): ``TooManyRequestsError``
→ 429, ``ServerError`` → its 5xx code (500 by default), ``BadResponseError`` → a 200 reply that
is not JSON, ``ApiConnectionError`` (``conn_reset``) → the connection is reset without a reply,
``RequestTimeoutError`` (``timeout``, and ``apply_then_fail`` after applying)
→ the reply is withheld for ``hang_seconds`` (or until :meth:`stop`) and the connection then
closed, which exercises the client's read timeout (``timeout_reply="504"`` answers 504
instead). :meth:`InMemoryApiServer.drop_watches` cuts open watch connections mid-stream.

Every response is sent with a single socket write and ``TCP_NODELAY`` is set on accepted
connections: a reply split into header and body writes meets the 40 ms delayed-ACK stall under
urllib3 keep-alive.

Threads: one accept thread plus one thread per connection (HTTP/1.1 keep-alive). :meth:`stop`
ends the watches and hung requests, shuts the connections down and joins every thread.

This module holds the server: its connections and their threads, start and stop, the token
check, the faults that act on a connection, and the lease and audit paths. The wire format
(routes, ``Status`` errors, encodings, discovery) is :mod:`~kdispatch.testing.httpserver_wire`;
the listener and the per-connection request handler are
:mod:`~kdispatch.testing.httpserver_handler`; the verbs, translated into calls of the stores,
are :mod:`~kdispatch.testing.httpserver_verbs`.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Mapping
from typing import Any, Literal
from urllib.parse import parse_qs

from loguru import logger

from kdispatch.actors.model.errors import (
    ApiConnectionError,
    ApiError,
    InvalidInputError,
    RequestTimeoutError,
)
from kdispatch.actors.model.kinds import DEFAULT_KINDS, KindTable

from .audit import RequestRecord
from .httpserver_handler import Handler, Listener
from .httpserver_verbs import Verbs
from .httpserver_wire import (
    INITIAL_EVENTS_END,
    JSON_PATCH_REJECTED,
    VERSION,
    Abort,
    HttpError,
    LeaseRoute,
    Route,
    discovery,
    error_reply,
    peer_closed,
    status_object,
)
from .memory import InMemoryApiServer
from .memory_leases import LeasePath, LeaseWrite
from .memory_leases import serve_http as serve_lease

__all__ = [
    "AUDIT_PATH",
    "INITIAL_EVENTS_END",
    "JSON_PATCH_REJECTED",
    "VERSION",
    "ApiServerHTTP",
    "discovery",
    "status_object",
]

AUDIT_PATH = "/debug/kdispatch/requests"


class ApiServerHTTP:
    """Serves an :class:`InMemoryApiServer` over HTTP on ``host:port`` (0 = a free port).

    ``token``: when set, requests must carry ``Authorization: Bearer <token>`` (else 401).
    ``kinds``: the kind table whose kinds are served (default: the process-wide one).
    ``stores``: kind → a kind-specific store answering that kind's requests instead of
    ``server`` (with the same generic methods: ``get``, ``list``, ``watch``, ``create``,
    ``update``, ``patch``, ``patch_status``, ``delete``, ``get_object``).
    ``hang_seconds``: how long an injected timeout withholds the reply. ``timeout_reply``:
    ``"hang"`` (default) or ``"504"``. ``start``/``stop`` run on the caller's thread; request
    handling runs on per-connection threads and never holds a lock of its own while waiting.
    """

    def __init__(
        self,
        server: InMemoryApiServer,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        token: str | None = None,
        hang_seconds: float = 30.0,
        timeout_reply: Literal["hang", "504"] = "hang",
        watch_poll: float = 0.2,
        kinds: KindTable | None = None,
        stores: Mapping[str, Any] | None = None,
    ) -> None:
        if not isinstance(server, InMemoryApiServer):
            raise InvalidInputError(f"server must be an InMemoryApiServer, got {server!r}")
        if kinds is not None and not isinstance(kinds, KindTable):
            raise InvalidInputError(f"kinds must be a KindTable, got {kinds!r}")
        if stores is not None and (
            not isinstance(stores, Mapping) or not all(isinstance(k, str) for k in stores)
        ):
            raise InvalidInputError("stores must map kind names to stores")
        self.kinds = kinds if kinds is not None else DEFAULT_KINDS
        for label, value in (("hang_seconds", hang_seconds), ("watch_poll", watch_poll)):
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise InvalidInputError(f"{label} must be a positive number, got {value!r}")
        if timeout_reply not in ("hang", "504"):
            raise InvalidInputError(f"timeout_reply must be 'hang' or '504', got {timeout_reply!r}")
        self.server = server
        self._host = host
        self._port = port
        self._token = token
        self._hang = float(hang_seconds)
        self._timeout_reply = timeout_reply
        self._watch_poll = float(watch_poll)
        self._lock = threading.Condition(threading.Lock())
        self._stopping = threading.Event()
        self._httpd: Listener | None = None
        self._accept_thread: threading.Thread | None = None
        self._conns: dict[threading.Thread, socket.socket] = {}
        self._conn_seq = 0
        self._verbs = Verbs(
            server,
            dict(stores or {}),
            watch_poll=self._watch_poll,
            lock=self._lock,
            stopping=self._stopping,
        )
        self._handle = self._verbs.handle  # serves one request of a kind's resource

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> ApiServerHTTP:
        """Bind and start serving. Caller's thread."""
        with self._lock:
            if self._httpd is not None:
                raise InvalidInputError("ApiServerHTTP already started")
            httpd = Listener((self._host, self._port), Handler)
            httpd.api = self
            self._httpd = httpd
        self._accept_thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"apiserver-http-accept:{httpd.server_address[1]}",
            daemon=True,
        )
        self._accept_thread.start()
        logger.debug("test apiserver listening on {}", self.url)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop accepting, end open watches and hung requests, close every connection and join
        every thread. Idempotent. Caller's thread."""
        with self._lock:
            httpd = self._httpd
            if httpd is None or self._stopping.is_set():
                return
            self._stopping.set()
        httpd.shutdown()
        if self._accept_thread is not None:
            self._accept_thread.join(timeout)
        deadline = time.monotonic() + timeout
        with self._lock:
            watches = dict(self._verbs.watches)
        for w in watches:
            w.stop()
        for thread in watches.values():  # let ended watches send their last chunk
            thread.join(max(0.0, deadline - time.monotonic()))
        with self._lock:
            conns = dict(self._conns)
        for sock in conns.values():
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        for thread in conns:
            thread.join(max(0.0, deadline - time.monotonic()))
        httpd.server_close()
        alive = [t.name for t in conns if t.is_alive()]
        if alive:
            logger.warning("test apiserver: threads still running after stop: {}", alive)

    def __enter__(self) -> ApiServerHTTP:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """``http://host:port`` once started."""
        if self._httpd is None:
            raise InvalidInputError("ApiServerHTTP not started")
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def open_connections(self) -> int:
        """Connections currently open (keep-alive ones included). Any thread."""
        with self._lock:
            return len(self._conns)

    def wait_connections(self, at_most: int, timeout: float) -> bool:
        """Wait until at most ``at_most`` connections are open; False on timeout. Any thread."""
        with self._lock:
            return self._lock.wait_for(lambda: len(self._conns) <= at_most, timeout)

    # ----------------------------------------------------------------- connections

    def _spawn_connection(self, sock: socket.socket, addr: Any) -> None:
        """Run one accepted connection on its own thread. Accept thread."""
        assert self._httpd is not None
        httpd = self._httpd
        with self._lock:
            if self._stopping.is_set():
                httpd.shutdown_request(sock)
                return
            self._conn_seq += 1
            thread = threading.Thread(
                target=self._serve_connection,
                args=(httpd, sock, addr),
                name=f"apiserver-http-conn-{self._conn_seq}",
                daemon=True,
            )
            self._conns[thread] = sock
        thread.start()

    def _serve_connection(self, httpd: Listener, sock: socket.socket, addr: Any) -> None:
        """Connection thread: serve requests until the connection closes."""
        try:
            httpd.finish_request(sock, addr)
        except Exception:
            httpd.handle_error(sock, addr)
        finally:
            httpd.shutdown_request(sock)
            with self._lock:
                self._conns.pop(threading.current_thread(), None)
                self._lock.notify_all()

    def _abort_connection(self, sock: socket.socket, *, reset: bool) -> None:
        """Close ``sock`` without a reply; ``reset`` sends a TCP RST. Connection thread."""
        with contextlib.suppress(OSError):
            if reset:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            else:
                sock.shutdown(socket.SHUT_RDWR)

    def _hang_until_gone(self, sock: socket.socket) -> None:
        """Withhold a reply for ``hang_seconds``, or until the client gives up or the server
        stops. Connection thread; holds no lock."""
        deadline = time.monotonic() + self._hang
        while not peer_closed(sock):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._stopping.wait(min(remaining, self._watch_poll)):
                return

    def _check_auth(self, header: str | None) -> None:
        """401 unless the configured bearer token is presented. Connection thread."""
        if self._token is None:
            return
        if header != f"Bearer {self._token}":
            raise HttpError(401, "Unauthorized", "Unauthorized")

    # ----------------------------------------------------------------- errors

    def _http_error(self, exc: ApiError, route: Route, sock: socket.socket) -> BaseException:
        """The HTTP behaviour of a backend error (a reply, or an abort). Connection thread."""
        if isinstance(exc, ApiConnectionError):
            return Abort(reset=True)
        if isinstance(exc, RequestTimeoutError):
            if self._timeout_reply == "504":
                return HttpError(504, "Timeout", str(exc), details=route.details())
            self._hang_until_gone(sock)
            return Abort(reset=False)
        return error_reply(exc, route)

    # ----------------------------------------------------------------- leases and audit

    def _serve_extra(
        self, h: Handler, method: str, path: str, query_string: str, body: Any
    ) -> bool:
        """Serve ``coordination.k8s.io/v1`` leases (:mod:`kdispatch.testing.memory_leases`) and the
        request audit (``GET /debug/kdispatch/requests``: the in-memory server's request log
        with each writer, and the lease writes); False for any other path. Connection
        thread."""
        if path == AUDIT_PATH and method == "GET":
            h._reply_json(200, self.audit())
            return True
        lease = LeasePath.parse(path)
        if lease is None:
            return False
        query = {k: v[-1] for k, v in parse_qs(query_string).items()}
        content_type = (h.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        route = LeaseRoute(lease)
        try:
            code, reply = serve_lease(
                self.server.leases, method, lease, query, body, content_type=content_type
            )
        except ApiError as exc:
            raise self._http_error(exc, route, h.connection) from None
        except InvalidInputError as exc:  # a body that is not JSON-shaped
            raise HttpError(422, "Invalid", str(exc), details=route.details()) from None
        h._reply_json(code, reply)
        return True

    def audit(self) -> dict[str, Any]:
        """The request log (``op``, ``kind``, ``namespace``, ``name``, ``uid``, ``outcome``,
        ``t``, ``writer``; in the order applied) and the lease writes. Any thread."""
        return {
            "requests": [list(r) for r in _records(self.server)],
            "request_fields": list(RequestRecord.__dataclass_fields__),
            "leases": [list(w) for w in _lease_writes(self.server)],
            "lease_fields": list(LeaseWrite.__dataclass_fields__),
        }


def _records(server: InMemoryApiServer) -> list[tuple[Any, ...]]:
    return [
        (r.op, r.kind, r.namespace, r.name, r.uid, r.outcome, r.t, r.writer)
        for r in server.request_log
    ]


def _lease_writes(server: InMemoryApiServer) -> list[tuple[Any, ...]]:
    return [
        (w.op, w.namespace, w.name, w.holder, w.resource_version, w.writer, w.t)
        for w in server.leases.writes
    ]
