"""``ApiServerHTTP``: the in-memory apiserver served over the real Kubernetes REST paths.

Tests drive it with the official ``kubernetes`` client, so the HTTP, serialization and error
paths of :class:`kdispatch.adapters.kubernetes.KubernetesBackend` and of the informers run for real.

Served (JSON only)::

    GET    /api/v1/pods                                    list / watch, all namespaces
    GET    /api/v1/namespaces/{ns}/pods                    list / watch
    POST   /api/v1/namespaces/{ns}/pods                    create (test setup; the server sets
                                                           uid, Pending status, schedulerName)
    GET    /api/v1/namespaces/{ns}/pods/{name}             get
    DELETE /api/v1/namespaces/{ns}/pods/{name}             delete (DeleteOptions body)
    PATCH  /api/v1/namespaces/{ns}/pods/{name}/status      strategic-merge or merge patch
    POST   /api/v1/namespaces/{ns}/pods/{name}/binding     v1 Binding → Status 201
    GET    /api/v1/nodes[/{name}]                          list / watch / get; POST, DELETE
    ...    /apis/resource.k8s.io/v1[/namespaces/{ns}]/resourceclaims[/{name}[/status]]

Behaviour follows the real apiserver where the client can see it: lists answer ``<Kind>List``
with ``metadata.resourceVersion`` and items without ``kind``/``apiVersion``; watches
(``?watch=true``, ``resourceVersion``, ``timeoutSeconds``) stream chunked JSON lines and report
a too-old resourceVersion as an ``ERROR`` event carrying ``Status{code: 410, reason: Expired}``;
a watch without a resourceVersion starts with synthetic ``ADDED`` events; ``metadata.uid`` and
``metadata.resourceVersion`` in a patch body, ``metadata.uid`` in a Binding and
``preconditions.uid`` in DeleteOptions are preconditions; errors are ``Status`` objects with
the upstream code and reason, and a 429 carries ``Retry-After``.

Faults injected by the in-memory server become transport behaviour: ``TooManyRequestsError``
→ 429, ``ServerError`` → 500, ``ApiConnectionError`` (``conn_reset``) → the connection is reset
without a reply, ``RequestTimeoutError`` (``timeout``, and ``apply_then_fail`` after applying)
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
import re
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

from kdispatch.actors.errors import (
    AlreadyExistsError,
    ApiConnectionError,
    ApiError,
    ConflictError,
    GoneError,
    InvalidInputError,
    InvalidObjectError,
    InvalidRequestError,
    NotFoundError,
    RequestTimeoutError,
    TooManyRequestsError,
)

from .memory import InMemoryApiServer, RequestRecord, request_writer
from .memory_leases import LeasePath, LeaseWrite
from .memory_leases import serve_http as serve_lease

_KINDS: Mapping[str, tuple[str, str]] = {
    # resource → (kind, apiVersion)
    "pods": ("Pod", "v1"),
    "nodes": ("Node", "v1"),
    "resourceclaims": ("ResourceClaim", "resource.k8s.io/v1"),
}

_ROUTES: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(
            r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods(?:/(?P<name>[^/]+)(?:/(?P<sub>[^/]+))?)?$"
        ),
        "pods",
    ),
    (re.compile(r"^/api/v1/pods$"), "pods"),
    (re.compile(r"^/api/v1/nodes(?:/(?P<name>[^/]+)(?:/(?P<sub>[^/]+))?)?$"), "nodes"),
    (
        re.compile(
            r"^/apis/resource\.k8s\.io/v1/namespaces/(?P<ns>[^/]+)/resourceclaims"
            r"(?:/(?P<name>[^/]+)(?:/(?P<sub>[^/]+))?)?$"
        ),
        "resourceclaims",
    ),
    (re.compile(r"^/apis/resource\.k8s\.io/v1/resourceclaims$"), "resourceclaims"),
)

_PATCH_TYPES = {
    "application/strategic-merge-patch+json": "strategic",
    "application/merge-patch+json": "merge",
}

_DEFAULT_WATCH_SECONDS = 1800.0
_MAX_BODY = 16 << 20


class _Abort(Exception):
    """End the request without a reply: ``reset`` closes with RST, else a plain close."""

    def __init__(self, *, reset: bool) -> None:
        super().__init__("connection aborted")
        self.reset = reset


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
    """A parsed request path."""

    __slots__ = ("kind", "name", "namespace", "plural", "sub")

    def __init__(self, plural: str, namespace: str | None, name: str | None, sub: str | None):
        self.plural = plural
        self.kind = _KINDS[plural][0]
        self.namespace = namespace
        self.name = name
        self.sub = sub

    def details(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.plural} if self.name else {"kind": self.plural}


def _route(path: str) -> _Route:
    for pattern, plural in _ROUTES:
        m = pattern.match(path)
        if m is not None:
            groups = m.groupdict()
            ns = groups.get("ns")
            if plural == "nodes":
                ns = ""
            return _Route(plural, ns, groups.get("name"), groups.get("sub"))
    raise _HttpError(404, "NotFound", "the server could not find the requested resource")


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
            api.check_auth(self.headers.get("Authorization"))
            url = urlsplit(self.path)
            if api.serve_extra(self, method, url.path, url.query):  # leases, request audit
                return
            route = _route(url.path)
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            body = self._body() if method in ("POST", "PATCH", "DELETE") else None
            try:
                api.handle(self, method, route, query, body)
            except ApiError as exc:
                raise api.http_error(exc, route, self.connection) from None
            except InvalidObjectError as exc:
                raise _HttpError(422, "Invalid", str(exc), details=route.details()) from None
            except InvalidInputError as exc:
                raise _HttpError(400, "BadRequest", str(exc)) from None
        except _HttpError as err:
            self._reply_error(err)
        except _Abort as abort:
            self.close_connection = True
            api.abort_connection(self.connection, reset=abort.reset)
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
        self.api.spawn_connection(request, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        logger.opt(exception=True).debug("test apiserver: connection error from {}", client_address)


class ApiServerHTTP:
    """Serves an :class:`InMemoryApiServer` over HTTP on ``host:port`` (0 = a free port).

    ``token``: when set, requests must carry ``Authorization: Bearer <token>`` (else 401).
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
    ) -> None:
        if not isinstance(server, InMemoryApiServer):
            raise InvalidInputError(f"server must be an InMemoryApiServer, got {server!r}")
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

    def spawn_connection(self, sock: socket.socket, addr: Any) -> None:
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

    def abort_connection(self, sock: socket.socket, *, reset: bool) -> None:
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

    def check_auth(self, header: str | None) -> None:
        """401 unless the configured bearer token is presented. Connection thread."""
        if self._token is None:
            return
        if header != f"Bearer {self._token}":
            raise _HttpError(401, "Unauthorized", "Unauthorized")

    # ----------------------------------------------------------------- errors

    def http_error(self, exc: ApiError, route: _Route, sock: socket.socket) -> BaseException:
        """The HTTP behaviour of a backend error (a reply, or an abort). Connection thread."""
        if isinstance(exc, ApiConnectionError):
            return _Abort(reset=True)
        if isinstance(exc, RequestTimeoutError):
            if self._timeout_reply == "504":
                return _HttpError(504, "Timeout", str(exc), details=route.details())
            self._hang_until_gone(sock)
            return _Abort(reset=False)
        if isinstance(exc, TooManyRequestsError):
            wait = exc.retry_after
            header = str(int(wait)) if float(wait).is_integer() else repr(float(wait))
            return _HttpError(
                429,
                "TooManyRequests",
                str(exc),
                details={**route.details(), "retryAfterSeconds": math.ceil(wait)},
                headers={"Retry-After": header},
            )
        if isinstance(exc, NotFoundError):
            return _HttpError(404, "NotFound", str(exc), details=route.details())
        if isinstance(exc, AlreadyExistsError):
            return _HttpError(409, "AlreadyExists", str(exc), details=route.details())
        if isinstance(exc, ConflictError):
            return _HttpError(409, "Conflict", str(exc), details=route.details())
        if isinstance(exc, GoneError):
            return _HttpError(410, "Expired", str(exc))
        if isinstance(exc, InvalidRequestError):
            code = exc.status if 400 <= exc.status < 500 else 422
            known = code != 422 and code in HTTPStatus._value2member_map_
            reason = HTTPStatus(code).phrase.replace(" ", "") if known else "Invalid"
            return _HttpError(code, reason, str(exc), details=route.details())
        code = exc.status if 500 <= exc.status <= 599 else 500
        return _HttpError(code, "InternalError", str(exc))

    # ----------------------------------------------------------------- requests

    def handle(
        self,
        h: _Handler,
        method: str,
        route: _Route,
        query: Mapping[str, str],
        body: Any,
    ) -> None:
        """Serve one request. Connection thread."""
        if route.name is None:
            if method == "GET":
                if query.get("watch") in ("true", "1"):
                    self._watch(h, route, query)
                else:
                    self._list(h, route, query)
                return
            if method == "POST" and route.namespace is not None:
                self._create(h, route, body)
                return
        elif route.sub is None:
            if method == "GET":
                h._reply_json(200, self.server.get(route.kind, route.namespace or "", route.name))
                return
            if method == "DELETE":
                self._delete(h, route, query, body)
                return
        elif route.sub == "status" and method == "PATCH" and route.plural != "nodes":
            self._patch_status(h, route, body)
            return
        elif route.sub == "binding" and method == "POST" and route.plural == "pods":
            self._bind(h, route, body)
            return
        raise _HttpError(405, "MethodNotAllowed", f"{method} is not supported on {h.path}")

    def _current_uid(self, route: _Route) -> str:
        obj = self.server.get_object(route.kind, route.namespace or "", route.name or "")
        if obj is None:
            raise NotFoundError(f'{route.plural} "{route.name}" not found')
        return str(obj["metadata"]["uid"])

    def _list(self, h: _Handler, route: _Route, query: Mapping[str, str]) -> None:
        _reject_selectors(query)
        items, rv = self.server.list(route.kind, namespace=route.namespace)
        kind, api_version = _KINDS[route.plural]
        h._reply_json(
            200,
            {
                "kind": f"{kind}List",
                "apiVersion": api_version,
                "metadata": {"resourceVersion": str(rv)},
                "items": [_strip_type(item) for item in items],
            },
        )

    def _create(self, h: _Handler, route: _Route, body: Any) -> None:
        if not isinstance(body, dict):
            raise _HttpError(400, "BadRequest", "body must be a JSON object")
        kind, api_version = _KINDS[route.plural]
        obj = dict(body)
        obj.setdefault("kind", kind)
        obj.setdefault("apiVersion", api_version)
        meta = dict(obj.get("metadata") or {})
        if route.namespace:
            if meta.get("namespace", route.namespace) != route.namespace:
                raise _HttpError(400, "BadRequest", "metadata.namespace does not match the path")
            meta["namespace"] = route.namespace
        # as the apiserver: the UID is the server's, and a new pod's status is reset to Pending
        # (a claim's to empty); a pod without a scheduler gets the default one
        meta.pop("uid", None)
        obj["metadata"] = meta
        if route.plural == "pods":
            spec = obj.get("spec")
            if isinstance(spec, dict):
                spec.setdefault("schedulerName", "default-scheduler")
            obj["status"] = {"phase": "Pending"}
        elif route.plural == "resourceclaims":
            obj["status"] = {}
        h._reply_json(201, self.server.create(obj))

    def _patch_status(self, h: _Handler, route: _Route, body: Any) -> None:
        content_type = (h.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        patch_type = _PATCH_TYPES.get(content_type)
        if patch_type is None:
            raise _HttpError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format: {content_type}",
            )
        if not isinstance(body, dict):
            raise _HttpError(400, "BadRequest", "patch body must be a JSON object")
        # The status subresource applies only status: the apiserver resets every other field
        # (spec, labels, ...) to the stored object's, so changes to them are silently dropped.
        meta = body.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        patch = {"status": body["status"]} if "status" in body else {}
        uid = meta.get("uid")
        rv = meta.get("resourceVersion")
        stored = self.server.get_object(route.kind, route.namespace or "", route.name or "")
        current = stored["metadata"]["uid"] if stored is not None else None
        if uid is not None and current is not None and uid != current:
            # not a precondition: the UID is applied to the object and fails validation
            raise _HttpError(
                422,
                "Invalid",
                f'{_qualified_kind(route)} "{route.name}" is invalid: metadata.uid: '
                f'Invalid value: "{uid}": field is immutable',
                details=_invalid_details(
                    route, "metadata.uid", f'Invalid value: "{uid}": field is immutable'
                ),
            )
        if uid is None:
            uid = self._current_uid(route)
        obj = self.server.patch_status(
            route.kind,
            route.namespace or "",
            route.name or "",
            patch,
            uid=str(uid),
            resource_version=None if rv is None else str(rv),
            patch_type=patch_type,  # type: ignore[arg-type]
        )
        h._reply_json(200, obj)

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
        uid = (meta.get("uid") if isinstance(meta, dict) else None) or self._current_uid(route)
        try:
            self.server.bind(route.namespace or "", route.name or "", uid=str(uid), node=node)
        except ConflictError as exc:
            if "pods/binding" not in str(exc):
                raise  # a UID precondition: reported on "pods"
            details = {"name": route.name, "kind": "pods/binding"}
            raise _HttpError(409, "Conflict", str(exc), details=details) from None
        h._reply_json(201, status_object(201, "", ""))

    def _delete(self, h: _Handler, route: _Route, query: Mapping[str, str], body: Any) -> None:
        options = body if isinstance(body, dict) else {}
        pre = options.get("preconditions")
        uid = pre.get("uid") if isinstance(pre, dict) else None
        grace = options.get("gracePeriodSeconds", query.get("gracePeriodSeconds"))
        if grace is not None:
            try:
                grace = int(grace)
            except (TypeError, ValueError):
                raise _HttpError(400, "BadRequest", f"bad gracePeriodSeconds {grace!r}") from None
        ns, name = route.namespace or "", route.name or ""
        before = self.server.get_object(route.kind, ns, name)
        if uid is None:
            uid = self._current_uid(route)
        try:
            self.server.delete(route.kind, ns, name, uid=str(uid), grace_period_seconds=grace)
        except ConflictError as exc:  # the apiserver names the kind here, not the resource
            raise _HttpError(
                409, "Conflict", str(exc), details={"name": name, "kind": route.kind}
            ) from None
        after = self.server.get_object(route.kind, ns, name)
        h._reply_json(200, after or before or status_object(200, "", ""))

    # ----------------------------------------------------------------- watch

    def _watch(self, h: _Handler, route: _Route, query: Mapping[str, str]) -> None:
        _reject_selectors(query)
        rv = query.get("resourceVersion") or None
        timeout = _DEFAULT_WATCH_SECONDS
        if "timeoutSeconds" in query:
            try:
                timeout = float(int(query["timeoutSeconds"]))
            except ValueError:
                raise _HttpError(400, "BadRequest", "bad timeoutSeconds") from None
        initial: list[dict[str, Any]] = []
        if rv in (None, "0"):
            initial, list_rv = self.server.list(route.kind, namespace=route.namespace)
            rv = str(list_rv)
        try:
            w = self.server.watch(route.kind, resource_version=rv, namespace=route.namespace)
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

    def serve_extra(self, h: _Handler, method: str, path: str, query_string: str) -> bool:
        """Serve ``coordination.k8s.io/v1`` leases (:mod:`adapters.memory_leases`) and the
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
        body = h._body() if method in ("POST", "PUT", "PATCH", "DELETE") else None
        content_type = (h.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        route = _LeaseRoute(lease)
        try:
            code, reply = serve_lease(
                self.server.leases, method, lease, query, body, content_type=content_type
            )
        except ApiError as exc:
            raise self.http_error(exc, route, h.connection) from None
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
    """``Pod``, ``ResourceClaim.resource.k8s.io``: how a 422 message names the kind."""
    api_version = _KINDS[route.plural][1]
    return f"{route.kind}.{api_version.split('/', 1)[0]}" if "/" in api_version else route.kind


def _invalid_details(route: _Route, field: str, message: str) -> dict[str, Any]:
    """``details`` of a 422 as the apiserver writes them: the kind (not the resource), the
    group for non-core kinds, and one cause."""
    details: dict[str, Any] = {"name": route.name, "kind": route.kind}
    api_version = _KINDS[route.plural][1]
    if "/" in api_version:
        details["group"] = api_version.split("/", 1)[0]
    details["causes"] = [{"reason": "FieldValueInvalid", "message": message, "field": field}]
    return details


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


def _reject_selectors(query: Mapping[str, str]) -> None:
    for key in ("labelSelector", "fieldSelector"):
        if query.get(key):
            raise _HttpError(400, "BadRequest", f"{key} is not supported by this test apiserver")
