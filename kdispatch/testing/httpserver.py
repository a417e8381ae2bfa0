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
"""

from __future__ import annotations

import contextlib
import json
import math
import select
import socket
import struct
import threading
import time
from collections.abc import Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any, Literal
from urllib.parse import parse_qs, urlsplit

from loguru import logger

from kdispatch.actors.model.errors import (
    AlreadyExistsError,
    ApiConnectionError,
    ApiError,
    BadResponseError,
    ConflictError,
    DisruptionBudgetError,
    GoneError,
    InvalidInputError,
    InvalidObjectError,
    InvalidRequestError,
    NotFoundError,
    RequestTimeoutError,
    TooManyRequestsError,
)
from kdispatch.actors.model.kinds import DEFAULT_KINDS, KindInfo, KindTable

from .audit import RequestRecord, request_writer
from .memory import InMemoryApiServer
from .memory_leases import LeasePath, LeaseWrite
from .memory_leases import serve_http as serve_lease
from .memory_patch import JsonPatchTestFailed, check_patch_flavour
from .memory_pdb import PDB_MESSAGE

_STATUS_ONLY_KINDS = frozenset({"Pod", "ResourceClaim"})
"""Kinds whose merge/strategic status patches go through ``patch_status`` (the dispatcher's
request, with its strict checks); every other kind uses the generic ``patch``."""

_PATCH_TYPES = {
    "application/strategic-merge-patch+json": "strategic",
    "application/merge-patch+json": "merge",
    "application/json-patch+json": "json",
}

JSON_PATCH_REJECTED = "the server rejected our request due to an error in our request"
"""kube-apiserver's whole message for a JSON patch whose ``test`` operation failed."""

VERSION: dict[str, str] = {
    "major": "1",
    "minor": "37",
    "gitVersion": "v1.37.2",
    "gitCommit": "",
    "gitTreeState": "",
    "buildDate": "",
    "goVersion": "",
    "compiler": "gc",
    "platform": "linux/amd64",
}
"""``GET /version``: the kube-apiserver release whose behaviour the emulator follows (the one
``kdispatch.testing.envtest`` builds, against which the conformance suite checks it)."""

_DEFAULT_WATCH_SECONDS = 1800.0
_SCHEDULER = "default-scheduler"
_MAX_BODY = 16 << 20


class _Abort(Exception):
    """End the request without a reply: ``reset`` closes with RST, else a plain close."""

    def __init__(self, *, reset: bool) -> None:
        super().__init__("connection aborted")
        self.reset = reset


class _Garbled(Exception):
    """Answer 200 with a body that is not JSON (a reply the client cannot understand)."""


def _delta_seconds(seconds: float) -> str:
    """``seconds`` as a ``Retry-After`` value, as given (a fraction as a decimal fraction,
    which the clients read)."""
    value = float(seconds)
    return str(int(value)) if value.is_integer() else repr(value)


class _HttpError(Exception):
    """Answer with a ``Status`` error object."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = headers or {}


def status_object(
    code: int, reason: str, message: str, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A ``v1.Status`` as the apiserver serves it."""
    status: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success" if 200 <= code < 300 else "Failure",
        "code": code,
    }
    if message:
        status["message"] = message
    if reason:
        status["reason"] = reason
    if details:
        status["details"] = details
    return status


def _dumps(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode("utf-8")


class _Route:
    """A parsed request path: the kind, and namespace/name/subresource when present."""

    __slots__ = ("info", "kind", "name", "namespace", "plural", "sub")

    def __init__(
        self, info: KindInfo, namespace: str | None, name: str | None, sub: str | None
    ) -> None:
        self.info = info
        self.kind = info.kind
        self.plural = info.plural
        self.namespace = namespace if info.namespaced else ""
        self.name = name
        self.sub = sub

    def details(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.plural} if self.name else {"kind": self.plural}


def _not_found() -> _HttpError:
    return _HttpError(404, "NotFound", "the server could not find the requested resource")


def _route(kinds: KindTable, path: str) -> _Route | tuple[str, str] | None:
    """The resource a path names; ``(group, version)`` for a discovery document of a group
    version (``("", "")`` for the group list); None for ``/api``."""
    parts = [p for p in path.split("/") if p]
    if parts[:1] == ["api"]:
        if len(parts) == 1:
            return None
        group, version, rest = "", parts[1], parts[2:]
    elif parts[:1] == ["apis"]:
        if len(parts) == 1:
            return ("", "")
        if len(parts) < 3:
            raise _not_found()
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        raise _not_found()
    if not rest:
        return (group or "core", version)
    namespace: str | None = None
    if rest[0] == "namespaces" and len(rest) >= 3:
        info = kinds.by_resource(group, version, rest[2])
        if info is not None and info.namespaced:
            namespace, rest = rest[1], rest[2:]
    info = kinds.by_resource(group, version, rest[0])
    if info is None or len(rest) > 3 or (info.namespaced and namespace is None and len(rest) > 1):
        raise _not_found()
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else None
    return _Route(info, namespace, name, sub)


class _Handler(BaseHTTPRequestHandler):
    """One HTTP/1.1 connection; runs on its connection thread."""

    protocol_version = "HTTP/1.1"
    server_version = "kdispatch-apiserver/1"
    server: _HTTPServer

    # ----------------------------------------------------------------- plumbing

    def log_message(self, format: str, *args: Any) -> None:
        logger.opt(lazy=True).trace("http {}", lambda: format % args)

    def _reply(self, code: int, payload: bytes, headers: Mapping[str, str] | None = None) -> None:
        """Send status line, headers and body in one write."""
        phrase = HTTPStatus(code).phrase if code in HTTPStatus._value2member_map_ else ""
        lines = [
            f"HTTP/1.1 {code} {phrase}",
            "Content-Type: application/json",
            f"Content-Length: {len(payload)}",
        ]
        lines.extend(f"{k}: {v}" for k, v in (headers or {}).items())
        if self.close_connection:
            lines.append("Connection: close")
        self.wfile.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + payload)
        self.log_request(code)

    def _reply_json(self, code: int, obj: object) -> None:
        self._reply(code, _dumps(obj))

    def _reply_error(self, err: _HttpError) -> None:
        self._reply(
            err.code,
            _dumps(status_object(err.code, err.reason, err.message, err.details)),
            err.headers,
        )

    def _body(self) -> Any:
        length = self.headers.get("Content-Length")
        if not length:
            return None
        try:
            size = int(length)
        except ValueError:
            raise _HttpError(400, "BadRequest", "bad Content-Length") from None
        if size < 0 or size > _MAX_BODY:
            raise _HttpError(413, "RequestEntityTooLarge", "request body too large")
        raw = self.rfile.read(size)
        if not raw:
            return None
        try:
            return json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise _HttpError(400, "BadRequest", f"request body is not JSON: {exc}") from None

    def _dispatch(self, method: str) -> None:
        api = self.server.api
        writer = request_writer.set(self.headers.get("User-Agent") or "")
        try:
            # the body first: a refused request must not leave it in the keep-alive stream
            body = self._body() if method in ("POST", "PATCH", "DELETE", "PUT") else None
            api._check_auth(self.headers.get("Authorization"))
            url = urlsplit(self.path)
            if api._serve_extra(self, method, url.path, url.query, body):  # leases, audit
                return
            if url.path in ("/version", "/version/") and method == "GET":
                self._reply_json(200, VERSION)
                return
            route = _route(api.kinds, url.path)
            if not isinstance(route, _Route):
                if method != "GET":
                    raise _HttpError(405, "MethodNotAllowed", f"{method} is not supported")
                self._reply_json(200, discovery(api.kinds, route))
                return
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            try:
                api._handle(self, method, route, query, body)
            except ApiError as exc:
                raise api._http_error(exc, route, self.connection) from None
            except InvalidObjectError as exc:
                raise _HttpError(422, "Invalid", str(exc), details=route.details()) from None
            except InvalidInputError as exc:
                raise _HttpError(400, "BadRequest", str(exc)) from None
        except _HttpError as err:
            self._reply_error(err)
        except _Garbled as garbled:
            self._reply(200, f"garbled: {garbled}".encode())
        except _Abort as abort:
            self.close_connection = True
            api._abort_connection(self.connection, reset=abort.reset)
        except OSError:  # the client went away mid-reply
            self.close_connection = True
        except Exception:
            logger.exception("test apiserver: unhandled error on {} {}", method, self.path)
            self.close_connection = True
            with contextlib.suppress(OSError):
                self._reply_json(500, status_object(500, "InternalError", "internal error"))
        finally:
            request_writer.reset(writer)

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def do_PUT(self) -> None:
        self._dispatch("PUT")


class _HTTPServer(HTTPServer):
    """Accepts connections and runs each on its own tracked thread."""

    daemon_threads = True
    allow_reuse_address = True
    api: ApiServerHTTP

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, addr = self.socket.accept()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock, addr

    def process_request(self, request: Any, client_address: Any) -> None:
        self.api._spawn_connection(request, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        logger.opt(exception=True).debug("test apiserver: connection error from {}", client_address)


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
        self._stores = dict(stores or {})
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
        self._httpd: _HTTPServer | None = None
        self._accept_thread: threading.Thread | None = None
        self._conns: dict[threading.Thread, socket.socket] = {}
        self._watches: dict[Any, threading.Thread] = {}  # open watch → its connection thread
        self._conn_seq = 0

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> ApiServerHTTP:
        """Bind and start serving. Caller's thread."""
        with self._lock:
            if self._httpd is not None:
                raise InvalidInputError("ApiServerHTTP already started")
            httpd = _HTTPServer((self._host, self._port), _Handler)
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
            watches = dict(self._watches)
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

    def _serve_connection(self, httpd: _HTTPServer, sock: socket.socket, addr: Any) -> None:
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
        while not _peer_closed(sock):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._stopping.wait(min(remaining, self._watch_poll)):
                return

    def _check_auth(self, header: str | None) -> None:
        """401 unless the configured bearer token is presented. Connection thread."""
        if self._token is None:
            return
        if header != f"Bearer {self._token}":
            raise _HttpError(401, "Unauthorized", "Unauthorized")

    # ----------------------------------------------------------------- errors

    def _http_error(self, exc: ApiError, route: _Route, sock: socket.socket) -> BaseException:
        """The HTTP behaviour of a backend error (a reply, or an abort). Connection thread."""
        if isinstance(exc, ApiConnectionError):
            return _Abort(reset=True)
        if isinstance(exc, RequestTimeoutError):
            if self._timeout_reply == "504":
                return _HttpError(504, "Timeout", str(exc), details=route.details())
            self._hang_until_gone(sock)
            return _Abort(reset=False)
        if isinstance(exc, DisruptionBudgetError):
            message, _, cause = str(exc).partition(PDB_MESSAGE)
            return _HttpError(
                429,
                "TooManyRequests",
                PDB_MESSAGE,
                details={
                    "causes": [{"reason": "DisruptionBudget", "message": cause.strip() or message}]
                },
            )
        if isinstance(exc, TooManyRequestsError):
            return _HttpError(
                429,
                "TooManyRequests",
                str(exc),
                details={**route.details(), "retryAfterSeconds": math.ceil(exc.retry_after)},
                headers={"Retry-After": _delta_seconds(exc.retry_after)},
            )
        if isinstance(exc, NotFoundError):
            return _HttpError(404, "NotFound", str(exc), details=route.details())
        if isinstance(exc, AlreadyExistsError):
            return _HttpError(409, "AlreadyExists", str(exc), details=route.details())
        if isinstance(exc, ConflictError):
            return _HttpError(409, "Conflict", str(exc), details=route.details())
        if isinstance(exc, GoneError):
            return _HttpError(410, "Expired", str(exc))
        if isinstance(exc, JsonPatchTestFailed):
            # kube-apiserver: a generic 422 without details, not the patch library's message
            return _HttpError(422, "Invalid", JSON_PATCH_REJECTED)
        if isinstance(exc, InvalidRequestError):
            code = exc.status if 400 <= exc.status < 500 else 422
            known = code != 422 and code in HTTPStatus._value2member_map_
            reason = HTTPStatus(code).phrase.replace(" ", "") if known else "Invalid"
            return _HttpError(code, reason, str(exc), details=route.details())
        if isinstance(exc, BadResponseError):
            return _Garbled(str(exc))
        code = exc.status if 500 <= exc.status <= 599 else 500
        wait = exc.retry_after
        headers = {"Retry-After": _delta_seconds(wait)} if wait else None
        return _HttpError(code, "InternalError", str(exc), headers=headers)

    # ----------------------------------------------------------------- requests

    def _store(self, kind: str) -> Any:
        """The store serving ``kind``: a plugged-in one, else the in-memory server."""
        return self._stores.get(kind, self.server)

    def _handle(
        self,
        h: _Handler,
        method: str,
        route: _Route,
        query: Mapping[str, str],
        body: Any,
    ) -> None:
        """Serve one request. Connection thread."""
        store = self._store(route.kind)
        ns, name = route.namespace or "", route.name or ""
        if route.name is None:
            if method == "GET":
                if query.get("watch") in ("true", "1"):
                    self._watch(h, route, query)
                else:
                    self._list(h, route, query)
                return
            if method == "POST" and (route.namespace is not None or not route.info.namespaced):
                self._create(h, route, body)
                return
        elif route.sub is None:
            if method == "GET":
                h._reply_json(200, store.get(route.kind, ns, name))
                return
            if method == "DELETE":
                self._delete(h, route, query, body)
                return
            if method == "PUT":
                self._replace(h, route, body)
                return
            if method == "PATCH":
                self._patch(h, route, body, None)
                return
        elif route.sub == "status" and route.info.status:
            if method == "GET":
                h._reply_json(200, store.get(route.kind, ns, name))
                return
            if method == "PATCH":
                self._patch(h, route, body, "status")
                return
        elif route.sub == "binding" and method == "POST" and route.kind == "Pod":
            self._bind(h, route, body)
            return
        elif route.sub == "eviction" and method == "POST" and route.kind == "Pod":
            self._evict(h, route, body)
            return
        raise _HttpError(405, "MethodNotAllowed", f"{method} is not supported on {h.path}")

    def _current_uid(self, route: _Route) -> str:
        obj = self._store(route.kind).get_object(
            route.kind, route.namespace or "", route.name or ""
        )
        if obj is None:
            raise NotFoundError(f'{route.plural} "{route.name}" not found')
        return str(obj["metadata"]["uid"])

    def _list(self, h: _Handler, route: _Route, query: Mapping[str, str]) -> None:
        if query.get("continue") and query.get("resourceVersion"):
            # the token carries the resourceVersion of the list it continues
            raise _HttpError(
                400, "BadRequest", "specifying resource version is not allowed when using continue"
            )
        limit = _int_query(query, "limit")
        items, rv, token = self._store(route.kind).list(
            route.kind,
            namespace=route.namespace or None,
            label_selector=query.get("labelSelector") or None,
            field_selector=query.get("fieldSelector") or None,
            limit=limit if limit else None,
            continue_token=query.get("continue") or None,
        )
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if token:
            meta["continue"] = token
        h._reply_json(
            200,
            {
                "kind": f"{route.kind}List",
                "apiVersion": route.info.api_version,
                "metadata": meta,
                "items": [_strip_type(item) for item in items],
            },
        )

    def _owned_body(self, route: _Route, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise _HttpError(400, "BadRequest", "body must be a JSON object")
        obj = dict(body)
        obj.setdefault("kind", route.kind)
        obj.setdefault("apiVersion", route.info.api_version)
        if obj["kind"] != route.kind:
            raise _HttpError(400, "BadRequest", f"body is a {obj['kind']!r}, not a {route.kind}")
        meta = dict(obj.get("metadata") or {})
        if route.namespace:
            if meta.get("namespace", route.namespace) != route.namespace:
                raise _HttpError(400, "BadRequest", "metadata.namespace does not match the path")
            meta["namespace"] = route.namespace
        if route.name is not None and meta.get("name", route.name) != route.name:
            raise _HttpError(400, "BadRequest", "metadata.name does not match the path")
        obj["metadata"] = meta
        return obj

    def _create(self, h: _Handler, route: _Route, body: Any) -> None:
        obj = self._owned_body(route, body)
        # as the apiserver: the UID is the server's, a new pod's status is reset to Pending (a
        # claim's to empty), and a pod without a scheduler gets the default one
        obj["metadata"].pop("uid", None)
        if route.kind == "Pod":
            spec = obj.get("spec")
            if isinstance(spec, dict):
                obj["spec"] = {**spec, "schedulerName": spec.get("schedulerName") or _SCHEDULER}
            obj["status"] = {"phase": "Pending"}
        elif route.kind == "ResourceClaim":
            obj["status"] = {}
        store = self._store(route.kind)
        try:
            if store is self.server:  # a request of its own: logged (and faultable), like a patch
                h._reply_json(201, store.create(route.kind, route.namespace or "", obj))
            else:
                h._reply_json(201, store.create(obj))
        except AlreadyExistsError as exc:  # the details name the object, as on a GET
            details = {"name": obj["metadata"].get("name"), "kind": route.plural}
            raise _HttpError(409, "AlreadyExists", str(exc), details=details) from None

    def _replace(self, h: _Handler, route: _Route, body: Any) -> None:
        obj = self._owned_body(route, body)
        obj["metadata"].setdefault("name", route.name)
        h._reply_json(200, self._store(route.kind).update(obj))

    def _patch(self, h: _Handler, route: _Route, body: Any, sub: str | None) -> None:
        content_type = (h.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        patch_type = _PATCH_TYPES.get(content_type)
        if patch_type is None:
            raise _HttpError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format: {content_type}",
            )
        check_patch_flavour(patch_type, route.info.patch)  # before the body is looked at
        store = self._store(route.kind)
        ns, name = route.namespace or "", route.name or ""
        if patch_type != "json":
            self._check_body_uid(route, body)
        if sub == "status" and patch_type != "json" and route.kind in _STATUS_ONLY_KINDS:
            self._patch_status(h, route, body, patch_type)
            return
        if patch_type == "json":
            if not isinstance(body, list):
                raise _HttpError(400, "BadRequest", "a JSON patch must be a list of operations")
        elif not isinstance(body, dict):
            raise _HttpError(400, "BadRequest", "patch body must be a JSON object")
        obj = store.patch(route.kind, ns, name, body, subresource=sub, patch_type=patch_type)
        h._reply_json(200, obj)

    def _patch_status(self, h: _Handler, route: _Route, body: Any, patch_type: str) -> None:
        if not isinstance(body, dict):
            raise _HttpError(400, "BadRequest", "patch body must be a JSON object")
        # The status subresource applies only status: the apiserver resets every other field
        # (spec, labels, ...) to the stored object's, so changes to them are silently dropped.
        meta = body.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        patch = {"status": body["status"]} if "status" in body else {}
        uid = meta.get("uid")
        rv = meta.get("resourceVersion")
        if uid is None:
            uid = self._current_uid(route)
        obj = self._store(route.kind).patch_status(
            route.kind,
            route.namespace or "",
            route.name or "",
            patch,
            uid=str(uid),
            resource_version=None if rv is None else str(rv),
            patch_type=patch_type,
        )
        h._reply_json(200, obj)

    def _check_body_uid(self, route: _Route, body: Any) -> None:
        """A ``metadata.uid`` in a strategic or merge patch body is not a precondition on
        kube-apiserver: it is applied to the object and fails validation as an immutable field
        (422 Invalid) when it is not the object's UID. Connection thread."""
        meta = body.get("metadata") if isinstance(body, dict) else None
        uid = meta.get("uid") if isinstance(meta, dict) else None
        if uid is None:
            return
        stored = self._store(route.kind).get_object(
            route.kind, route.namespace or "", route.name or ""
        )
        if stored is None or uid == stored["metadata"].get("uid"):
            return
        cause = f"Invalid value: {json.dumps(uid)}: field is immutable"
        raise _HttpError(
            422,
            "Invalid",
            f'{_qualified_kind(route)} "{route.name}" is invalid: metadata.uid: {cause}',
            details=_invalid_details(route, "metadata.uid", cause),
        )

    def _bind(self, h: _Handler, route: _Route, body: Any) -> None:
        if not isinstance(body, dict):
            raise _HttpError(400, "BadRequest", "body must be a v1 Binding")
        target = body.get("target")
        node = target.get("name") if isinstance(target, dict) else None
        if not isinstance(node, str) or not node:
            raise _HttpError(
                422, "Invalid", "Binding.target.name: Required value", details=route.details()
            )
        meta = body.get("metadata")
        if isinstance(meta, dict) and meta.get("name", route.name) != route.name:
            raise _HttpError(400, "BadRequest", "name in URL does not match name in Binding object")
        uid = (meta.get("uid") if isinstance(meta, dict) else None) or self._current_uid(route)
        try:
            self.server.bind(route.namespace or "", route.name or "", uid=str(uid), node=node)
        except ConflictError as exc:
            if "pods/binding" not in str(exc):
                raise  # a UID precondition: reported on "pods"
            details = {"name": route.name, "kind": "pods/binding"}
            raise _HttpError(409, "Conflict", str(exc), details=details) from None
        h._reply_json(201, status_object(201, "", ""))

    def _evict(self, h: _Handler, route: _Route, body: Any) -> None:
        if not isinstance(body, dict) or body.get("kind", "Eviction") != "Eviction":
            raise _HttpError(400, "BadRequest", "body must be a policy/v1 Eviction")
        meta = body.get("metadata")
        if isinstance(meta, dict) and meta.get("name", route.name) != route.name:
            raise _HttpError(
                400, "BadRequest", "name in URL does not match name in Eviction object"
            )
        uid, rv, grace = _delete_options(body.get("deleteOptions"), {})
        try:
            self.server.evict(
                route.namespace or "",
                route.name or "",
                uid=uid,
                resource_version=rv,
                grace_period_seconds=grace,
            )
        except ConflictError as exc:  # a failed precondition, reported as a deletion's
            raise _deletion_conflict(exc, route) from None
        h._reply_json(201, status_object(201, "", ""))

    def _delete(self, h: _Handler, route: _Route, query: Mapping[str, str], body: Any) -> None:
        uid, rv, grace = _delete_options(body, query)
        store = self._store(route.kind)
        ns, name = route.namespace or "", route.name or ""
        before = store.get_object(route.kind, ns, name)
        if uid is None:
            uid = self._current_uid(route)
        try:
            store.delete(
                route.kind, ns, name, uid=uid, resource_version=rv, grace_period_seconds=grace
            )
        except ConflictError as exc:
            raise _deletion_conflict(exc, route) from None
        after = store.get_object(route.kind, ns, name)
        h._reply_json(200, after or before or status_object(200, "", ""))

    # ----------------------------------------------------------------- watch

    def _watch(self, h: _Handler, route: _Route, query: Mapping[str, str]) -> None:
        store = self._store(route.kind)
        selectors = {
            "label_selector": query.get("labelSelector") or None,
            "field_selector": query.get("fieldSelector") or None,
        }
        rv = query.get("resourceVersion") or None
        timeout = _DEFAULT_WATCH_SECONDS
        if "timeoutSeconds" in query:
            try:
                timeout = float(int(query["timeoutSeconds"]))
            except ValueError:
                raise _HttpError(400, "BadRequest", "bad timeoutSeconds") from None
        initial: list[dict[str, Any]] = []
        initial_end = False
        if rv in (None, "0"):
            # kube-apiserver ends the initial ADDED events with a BOOKMARK when asked for them
            initial_end = query.get("allowWatchBookmarks") == "true"
            initial, list_rv, _ = store.list(
                route.kind, namespace=route.namespace or None, **selectors
            )
            rv = str(list_rv)
        try:
            w = store.watch(
                route.kind,
                resource_version=rv,
                namespace=route.namespace or None,
                **selectors,
            )
        except GoneError:  # the apiserver reports it in the stream, not as the HTTP status
            # as kube-apiserver words it for a watch served from etcd (no watch cache)
            status = status_object(
                410, "Expired", "The resourceVersion for the provided watch is too old."
            )
            self._start_stream(h)
            h.wfile.write(_chunk({"type": "ERROR", "object": status}) + b"0\r\n\r\n")
            return
        with self._lock:
            if self._stopping.is_set():
                w.stop()
            self._watches[w] = threading.current_thread()
        try:
            self._start_stream(h)
            for obj in initial:
                h.wfile.write(_chunk({"type": "ADDED", "object": obj}))
            if initial_end:
                h.wfile.write(_chunk({"type": "BOOKMARK", "object": _initial_end(route, rv)}))
            if self._stream(h, w, time.monotonic() + timeout):
                h.wfile.write(b"0\r\n\r\n")
        finally:
            w.stop()
            with self._lock:
                self._watches.pop(w, None)

    @staticmethod
    def _start_stream(h: _Handler) -> None:
        """Send the headers of a chunked watch reply. The connection closes after the watch."""
        h.close_connection = True
        h.wfile.write(
            (
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            ).encode("latin-1")
        )

    def _stream(self, h: _Handler, w: Any, deadline: float) -> bool:
        """Send events until the deadline, a stop, or a drop. True for a clean end (send the
        last chunk), False when the connection must be cut."""
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return True
            event = w.next(timeout=min(remaining, self._watch_poll))
            if event is not None:
                h.wfile.write(_chunk({"type": event.type, "object": event.object}))
                continue
            if w.ended:
                if w.dropped:
                    raise _Abort(reset=True)
                return True
            if _peer_closed(h.connection):
                return False

    # ----------------------------------------------------------------- leases and audit

    def _serve_extra(
        self, h: _Handler, method: str, path: str, query_string: str, body: Any
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
        route = _LeaseRoute(lease)
        try:
            code, reply = serve_lease(
                self.server.leases, method, lease, query, body, content_type=content_type
            )
        except ApiError as exc:
            raise self._http_error(exc, route, h.connection) from None
        except InvalidInputError as exc:  # a body that is not JSON-shaped
            raise _HttpError(422, "Invalid", str(exc), details=route.details()) from None
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


AUDIT_PATH = "/debug/kdispatch/requests"


class _LeaseRoute(_Route):
    """A lease path as a route (for error details)."""

    def __init__(self, lease: LeasePath) -> None:
        self.plural = "leases"
        self.kind = "Lease"
        self.namespace = lease.namespace
        self.name = lease.name
        self.sub = None


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


def _qualified_kind(route: _Route) -> str:
    """``Pod``, ``ResourceClaim.resource.k8s.io``: how the apiserver names a kind in a 422
    message and in a deletion's precondition conflict."""
    return f"{route.kind}.{route.info.group}" if route.info.group else route.kind


def _deletion_conflict(exc: ConflictError, route: _Route) -> _HttpError:
    """The 409 of a deletion's (or an eviction's) failed precondition: kube-apiserver names
    the kind in its details here, not the resource."""
    return _HttpError(409, "Conflict", str(exc), details=_kind_details(route))


def _kind_details(route: _Route) -> dict[str, Any]:
    """``details`` naming the kind (not the resource) and, for non-core kinds, the group."""
    details: dict[str, Any] = {"name": route.name, "kind": route.kind}
    if route.info.group:
        details["group"] = route.info.group
    return details


def _invalid_details(route: _Route, field: str, message: str) -> dict[str, Any]:
    """``details`` of a 422 as the apiserver writes them: the kind, its group, one cause."""
    details = _kind_details(route)
    details["causes"] = [{"reason": "FieldValueInvalid", "message": message, "field": field}]
    return details


INITIAL_EVENTS_END = "k8s.io/initial-events-end"


def _initial_end(route: _Route, rv: str) -> dict[str, Any]:
    """The BOOKMARK object that ends a watch's initial events: an empty object of the kind at
    the resourceVersion they were listed at, annotated ``k8s.io/initial-events-end``."""
    return {
        "kind": route.kind,
        "apiVersion": route.info.api_version,
        "metadata": {"resourceVersion": rv, "annotations": {INITIAL_EVENTS_END: "true"}},
    }


def _chunk(event: Mapping[str, Any]) -> bytes:
    data = _dumps(event) + b"\n"
    return f"{len(data):x}\r\n".encode("ascii") + data + b"\r\n"


def _peer_closed(sock: socket.socket) -> bool:
    """Whether the client closed its end of a watch connection (it never sends anything else)."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        if not readable:
            return False
        return sock.recv(1, socket.MSG_PEEK) == b""
    except (OSError, ValueError):
        return True


def _strip_type(item: Mapping[str, Any]) -> dict[str, Any]:
    """A list item as the apiserver serves it: without ``kind`` and ``apiVersion``."""
    return {k: v for k, v in item.items() if k not in ("kind", "apiVersion")}


def _int_query(query: Mapping[str, str], key: str) -> int | None:
    raw = query.get(key)
    if raw is None or raw == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        raise _HttpError(400, "BadRequest", f"bad {key} {raw!r}") from None
    if value < 0:
        raise _HttpError(400, "BadRequest", f"bad {key} {raw!r}")
    return value


def _delete_options(
    options: object, query: Mapping[str, str]
) -> tuple[str | None, str | None, int | None]:
    """(uid, resourceVersion, gracePeriodSeconds) of DeleteOptions (or the query)."""
    opts = options if isinstance(options, dict) else {}
    pre = opts.get("preconditions")
    pre = pre if isinstance(pre, dict) else {}
    uid, rv = pre.get("uid"), pre.get("resourceVersion")
    grace = opts.get("gracePeriodSeconds", query.get("gracePeriodSeconds"))
    if grace is not None:
        try:
            grace = int(grace)
        except (TypeError, ValueError):
            raise _HttpError(400, "BadRequest", f"bad gracePeriodSeconds {grace!r}") from None
    return (
        None if uid is None else str(uid),
        None if rv is None else str(rv),
        grace,
    )


def discovery(kinds: KindTable, which: tuple[str, str] | None) -> dict[str, Any]:
    """A discovery document of the kind table: ``/api`` (None), ``/apis`` (``("", "")``) or
    one group version's APIResourceList."""
    if which is None:
        return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
    group, version = which
    if not group:
        versions: dict[str, set[str]] = {}
        for info in kinds:
            if info.group:
                versions.setdefault(info.group, set()).add(info.version)
        groups = []
        for name in sorted(versions):
            vs = [{"groupVersion": f"{name}/{v}", "version": v} for v in sorted(versions[name])]
            groups.append({"name": name, "versions": vs, "preferredVersion": vs[0]})
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
    group = "" if group == "core" else group
    resources: list[dict[str, Any]] = []
    for info in kinds:
        if info.group != group or info.version != version:
            continue
        resources.append(
            {
                "name": info.plural,
                "singularName": info.kind.lower(),
                "namespaced": info.namespaced,
                "kind": info.kind,
                "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
            }
        )
        if info.status:
            resources.append(
                {
                    "name": f"{info.plural}/status",
                    "singularName": "",
                    "namespaced": info.namespaced,
                    "kind": info.kind,
                    "verbs": ["get", "patch", "update"],
                }
            )
    if not resources:
        raise _not_found()
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }
