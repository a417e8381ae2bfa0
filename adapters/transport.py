"""How requests reach the apiserver: two transports over one official-client ``ApiClient``,
both keeping its ``Configuration`` (auth and token refresh, TLS, proxies) and its urllib3 pool:
:class:`LeanTransport` (``"lean"``, the default: prebuilt JSON straight through the pool, raw
JSON replies) and :class:`ClientTransport` (``"client"``: the official ``param_serialize`` +
``call_api`` path, replies read raw too).

Failures become :mod:`kdispatch.actors.model.errors` types (:func:`error_from_status`,
:func:`map_transport_error`; the table is in :mod:`kdispatch.actors.model.backend`), with the
operation, HTTP status, reason and the server's message, never request headers. urllib3's own
retries are off: the executor owns the retry policy. Every function runs on the calling thread
and is safe from many threads at once.
"""

from __future__ import annotations

import http.client
import json
import math
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Literal, NamedTuple
from urllib.parse import urlencode

import urllib3
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from kdispatch.actors.model.errors import (
    AlreadyExistsError,
    ApiConnectionError,
    ApiError,
    BadResponseError,
    ConflictError,
    DisruptionBudgetError,
    ForbiddenError,
    GoneError,
    InvalidConfigError,
    InvalidRequestError,
    NotFoundError,
    RequestTimeoutError,
    ServerError,
    TooManyRequestsError,
    UnauthorizedError,
    without_tracebacks,
)

TransportName = Literal["lean", "client"]

_MESSAGE_LIMIT = 300
_JSON = "application/json"

Query = Sequence[tuple[str, str]]


# --------------------------------------------------------------------------- error mapping


def status_body(body: object) -> Mapping[str, Any]:
    """The ``Status`` object in an error reply, or an empty mapping when there is none."""
    if isinstance(body, bytes | bytearray):
        try:
            body = bytes(body).decode("utf-8")
        except UnicodeDecodeError:
            return {}
    if not isinstance(body, str) or not body:
        return {}
    try:
        parsed = json.loads(body)
    except json.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def retry_after(headers: Mapping[str, str] | None, status: Mapping[str, Any]) -> float:
    """Seconds to wait, from ``Retry-After`` (delta-seconds) or ``details.retryAfterSeconds``."""
    if headers is not None:
        raw = headers.get("Retry-After")
        if raw is not None:
            try:
                value = float(raw.strip())
            except ValueError:  # an HTTP-date or garbage: fall back to the Status details
                value = -1.0
            if math.isfinite(value) and value >= 0:
                return value
    details = status.get("details")
    if isinstance(details, Mapping):
        seconds = details.get("retryAfterSeconds")
        if isinstance(seconds, int | float) and not isinstance(seconds, bool) and seconds >= 0:
            return float(seconds)
    return 0.0


def _has_cause(status: Mapping[str, Any], key: str, value: str) -> bool:
    """Whether one of the ``Status``'s ``details.causes`` has ``key`` equal to ``value``."""
    details = status.get("details")
    causes = details.get("causes") if isinstance(details, Mapping) else None
    return isinstance(causes, list) and any(
        isinstance(c, Mapping) and c.get(key) == value for c in causes
    )


def error_from_status(
    code: int,
    status: Mapping[str, Any],
    what: str,
    headers: Mapping[str, str] | None = None,
    *,
    http_reason: object = None,
) -> ApiError:
    """The :class:`ApiError` for HTTP ``code`` with its ``Status`` body (possibly empty), as
    answered to a request or carried by a watch ``ERROR`` event. A 422 that rejects
    ``metadata.uid`` (a patch body's UID precondition failing) is a ``ConflictError``."""
    reason = status.get("reason") if isinstance(status.get("reason"), str) else None
    message = status.get("message")
    server_msg = message if isinstance(message, str) else ""
    text = f"{what}: HTTP {code} {reason or http_reason or ''}".rstrip()
    if server_msg:
        text += f": {server_msg[:_MESSAGE_LIMIT]}"
    if code == 401:
        return UnauthorizedError(text)
    if code == 403:
        return ForbiddenError(text)
    if code == 404:
        return NotFoundError(text)
    if code == 409:
        if reason == "AlreadyExists":
            return AlreadyExistsError(text)
        return ConflictError(text)
    if code == 410:
        return GoneError(text)
    if code == 429:
        wait = retry_after(headers, status)
        # the eviction subresource refusing for a PodDisruptionBudget
        if _has_cause(status, "reason", "DisruptionBudget") or "disruption budget" in server_msg:
            return DisruptionBudgetError(text, retry_after=wait)
        return TooManyRequestsError(text, retry_after=wait)
    if code in (408, 504):
        return RequestTimeoutError(text, status=code, retry_after=retry_after(headers, status))
    if 500 <= code <= 599:
        return ServerError(text, status=code, retry_after=retry_after(headers, status))
    if code == 422 and _has_cause(status, "field", "metadata.uid"):
        return ConflictError(text)  # the patch body's UID is not the object's
    if 400 <= code <= 499:
        return InvalidRequestError(text, status=code)
    return BadResponseError(text, status=code)


def map_api_exception(exc: ApiException, what: str) -> ApiError:
    """Translate an HTTP error of the official client into an :class:`ApiError`."""
    code = exc.status if isinstance(exc.status, int) else 0
    if code == 0:
        # Raised by the client's REST layer itself (TLS failure, unpreparable request).
        return ApiConnectionError(
            f"{what}: {str(exc.reason or 'transport error')[:_MESSAGE_LIMIT]}"
        )
    headers = exc.headers if isinstance(exc.headers, Mapping) else None
    return error_from_status(code, status_body(exc.body), what, headers, http_reason=exc.reason)


def map_transport_error(exc: BaseException, what: str) -> ApiError:
    """Translate a urllib3 / socket failure (no HTTP reply) into an :class:`ApiError`."""
    if isinstance(exc, urllib3.exceptions.MaxRetryError) and exc.reason is not None:
        exc = exc.reason
    name = type(exc).__name__
    if isinstance(exc, urllib3.exceptions.ResponseError):
        # a reply came (a redirect: not followed, as the lean transport sends with redirect off)
        return BadResponseError(f"{what}: reply not followed ({exc})")
    if isinstance(exc, urllib3.exceptions.NewConnectionError):
        return ApiConnectionError(f"{what}: cannot connect ({name})")
    if isinstance(exc, urllib3.exceptions.TimeoutError | TimeoutError):
        return RequestTimeoutError(f"{what}: client-side timeout ({name})")
    return ApiConnectionError(f"{what}: connection failed ({name})")


@contextmanager
def translate_errors(what: str) -> Iterator[None]:
    """Run client or urllib3 code, re-raising its failures as :class:`ApiError` types. The
    cause comes without its traceback: its frames would hold it (urllib3's do, in locals) in
    reference cycles the cyclic collector alone frees. A header value that cannot be sent (a
    token with a line break) is an :class:`InvalidConfigError` that does not quote it."""
    try:
        yield
    except ApiError:
        raise
    except ApiException as exc:
        raise map_api_exception(exc, what) from without_tracebacks(exc)
    except (urllib3.exceptions.HTTPError, http.client.HTTPException, OSError) as exc:
        raise map_transport_error(exc, what) from without_tracebacks(exc)
    except ValueError as exc:
        if "header" not in str(exc):
            raise
        # http.client refuses a header value with a line break and quotes the value in its
        # message (its frames hold it too): that value may be the bearer token
        exc.args = ("invalid header value (withheld)",)
        raise InvalidConfigError(
            f"{what}: not sent: a request header is not a valid HTTP header value "
            "(a bearer token or header with a line break?)"
        ) from without_tracebacks(exc)


def decode_object(data: object, what: str, noun: str = "reply") -> dict[str, Any]:
    """Decode a whole reply body (or one watch event line, ``noun="event"``) as one JSON
    object (``BadResponseError`` otherwise)."""
    if not isinstance(data, bytes | bytearray) or not data:
        raise BadResponseError(f"{what}: empty {noun}")
    try:
        parsed = json.loads(data)
    except UnicodeDecodeError:
        raise BadResponseError(f"{what}: {noun} is not UTF-8") from None
    except json.JSONDecodeError as exc:
        raise BadResponseError(f"{what}: {noun} is not JSON ({exc.msg})") from None
    if not isinstance(parsed, dict):
        raise BadResponseError(f"{what}: {noun} is a JSON {type(parsed).__name__}, not an object")
    return parsed


def read_json_object(resp: Any, what: str, deadline: float) -> dict[str, Any]:
    """Read a whole ``preload_content=False`` urllib3 reply by ``deadline``
    (``time.monotonic()``, :func:`_read_within`) and decode it as one JSON object."""
    return decode_object(_read_within(resp, deadline), what)


_ENCODER = json.JSONEncoder(separators=(",", ":"))  # json.dumps would build one per call


def dumps(obj: object) -> bytes:
    """Compact JSON, as sent on the wire."""
    return _ENCODER.encode(obj).encode("utf-8")


# --------------------------------------------------------------------------- configuration


def no_urllib3_retries() -> urllib3.Retry:
    """A retry policy that never retries: the executor decides about retries."""
    return urllib3.Retry(total=0, connect=0, read=0, redirect=0, status=0, other=0)


def check_workers(workers: object) -> int:
    """``workers`` if it is an int >= 1, else :class:`InvalidConfigError`."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise InvalidConfigError(f"workers must be a positive int, got {workers!r}")
    return workers


def prepare_configuration(cfg: k8s.Configuration, workers: int) -> k8s.Configuration:
    """Size the connection pool for ``workers`` threads and switch off urllib3 retries."""
    check_workers(workers)
    current = cfg.connection_pool_maxsize or 0
    cfg.connection_pool_maxsize = max(int(current), workers)
    cfg.retries = no_urllib3_retries()
    return cfg


def pool_without_retries(api_client: k8s.ApiClient) -> None:
    """Switch urllib3's own retries (and redirects) off in ``api_client``'s pool, as
    :func:`prepare_configuration` does for a ``Configuration``: ``call_api`` takes no retries
    per request. Open pools are reopened when that changes anything. Any thread, at setup."""
    manager: Any = api_client.rest_client.pool_manager
    current = manager.connection_pool_kw.get("retries")
    if isinstance(current, urllib3.Retry) and all(
        getattr(current, field) == 0 for field in ("total", "connect", "read", "redirect")
    ):
        return  # e.g. a Configuration from prepare_configuration
    manager.connection_pool_kw["retries"] = no_urllib3_retries()
    manager.clear()


def size_pool(api_client: k8s.ApiClient, workers: int) -> None:
    """Make ``api_client``'s urllib3 pool keep at least ``workers`` connections per host (so
    ``workers`` threads never see "Connection pool is full"); open pools are reopened at the
    new size (a request in flight finishes on its own connection). Any thread, at setup."""
    check_workers(workers)
    cfg: Any = api_client.configuration
    current = int(cfg.connection_pool_maxsize or 0)
    manager: Any = api_client.rest_client.pool_manager
    if current >= workers and int(manager.connection_pool_kw.get("maxsize", 1)) >= workers:
        return
    cfg.connection_pool_maxsize = max(current, workers)
    manager.connection_pool_kw["maxsize"] = cfg.connection_pool_maxsize
    manager.clear()


def positive_seconds(value: object, name: str = "request_timeout") -> float:
    """``value`` as a float if it is a positive finite number, else :class:`InvalidConfigError`
    naming the setting."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise InvalidConfigError(f"{name} must be a positive number, got {value!r}")
    if not math.isfinite(value):
        raise InvalidConfigError(f"{name} must be finite")
    return float(value)


# --------------------------------------------------------------------------- transports


class Reply(NamedTuple):
    """A 2xx reply: status code and the whole body."""

    status: int
    data: bytes


class Transport(ABC):
    """Sends one request. Thread-safe; runs on the calling thread. A transport only says how
    a request is put on the wire (:meth:`_open`)."""

    name: str

    def request(
        self,
        method: str,
        path: str,
        *,
        what: str,
        timeout: float,
        query: Query = (),
        body: object = None,
        content_type: str = _JSON,
    ) -> Reply:
        """Calling thread. Send ``body`` (a JSON value, or None) and read the whole reply,
        all within ``timeout`` seconds: connecting, waiting for the reply and reading its body
        (:func:`_read_within`). A non-2xx reply raises its :class:`ApiError`; so does a
        transport failure, and running out of time (:class:`~kdispatch.RequestTimeoutError`)."""
        ctype = None if body is None else content_type
        deadline = time.monotonic() + timeout
        with translate_errors(what):
            resp = self._open(_Request(method, path, query, body, ctype, timeout), preload=False)
            data = _read_within(resp, deadline)
        _raise_for_status(resp.status, resp.headers, data, what)
        return Reply(resp.status, data)

    def stream(
        self, path: str, *, what: str, timeout: float, idle: float, query: Query = ()
    ) -> Any:
        """Calling thread. GET ``path`` without reading the body (a watch): the open urllib3
        response of a 2xx reply, whose head came within ``timeout``; after it, each wait for
        the body's data is bounded by ``idle``. Errors as :meth:`request`."""
        deadline = time.monotonic() + timeout
        with translate_errors(what):
            resp = self._open(_Request("GET", path, query, None, None, timeout), preload=False)
            if not 200 <= resp.status <= 299:
                data = _read_within(resp, deadline)
                _raise_for_status(resp.status, resp.headers, data, what)
        sock = getattr(getattr(resp, "connection", None), "sock", None)
        if sock is not None:
            sock.settimeout(idle)
        return resp

    @abstractmethod
    def _open(self, req: _Request, *, preload: bool) -> Any:
        """Send one request; the urllib3 response, its body already read when ``preload`` (a
        hint: it may be read later). Each wait (to connect, for the reply's head) is bounded
        by ``req.timeout``. Calling thread."""


class _Request(NamedTuple):
    """One request as a transport puts it on the wire (``content_type`` None: no body)."""

    method: str
    path: str
    query: Query
    body: object
    content_type: str | None
    timeout: float


_CHUNK = 1 << 16
"""Bytes a read of a reply's body asks for at most."""


def _read_within(resp: Any, deadline: float) -> bytes:
    """The whole body of an unread urllib3 response, read by ``deadline`` (``time.monotonic()``):
    each wait for data is bounded by the time left, which is checked between reads, so a server
    that trickles its reply cannot hold the request past the deadline (``TimeoutError``, or
    urllib3's ``ReadTimeoutError``, then). The connection goes back to the pool, closed unless
    the body was read to its end."""
    conn = getattr(resp, "connection", None)
    sock = getattr(conn, "sock", None)
    # a body sent as it is (no Content-Encoding, the usual reply) skips urllib3's decoder, and
    # its end is known by its length: no read just to find it
    plain = not resp.headers.get("content-encoding")
    parts: list[bytes] = []
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("reading the reply took longer than the request timeout")
            if sock is not None:
                sock.settimeout(left)
            chunk = resp.read1(_CHUNK, decode_content=False) if plain else resp.read1(_CHUNK)
            if chunk:
                parts.append(chunk)
            if not chunk or (plain and resp.length_remaining == 0):
                return b"".join(parts)
    except BaseException:
        resp.close()  # read in part: the connection is not reused
        raise
    finally:
        resp.release_conn()


_AUTHORIZATION = "authorization"
"""The header the official client's ``BearerToken`` auth setting names."""


def _trimmed(value: str) -> str:
    """An auth header's value without surrounding whitespace: the official client sends a
    kubeconfig's ``tokenFile`` as read, where client-go trims it, and the newline ending a file
    written by ``echo`` or ``kubectl create token`` is in no header's value."""
    return value.strip()


def _raise_for_status(status: int, headers: Mapping[str, str], data: bytes, what: str) -> None:
    if not 200 <= status <= 299:
        raise error_from_status(status, status_body(data), what, headers)


class LeanTransport(Transport):
    """Prebuilt JSON through the official client's own urllib3 pool: straight to the host's
    connection pool (looked up again after the pool manager was cleared), or through the
    client's ``ProxyManager``, which adds the proxy headers."""

    name = "lean"

    def __init__(self, api_client: k8s.ApiClient) -> None:
        self._client: Any = api_client
        self._cfg: Any = api_client.configuration
        self._retries = no_urllib3_retries()
        self._timeouts: dict[float, urllib3.Timeout] = {}
        self._pool: Any = None
        self._pool_lock = threading.Lock()
        # a host may carry a path prefix (an API proxy): requests to the pool keep it
        self._base = (urllib3.util.parse_url(self._cfg.host).path or "").rstrip("/")

    def _headers(self, content_type: str | None) -> dict[str, str]:
        headers = {"Accept": _JSON}
        headers.update(self._client.default_headers)  # User-Agent, and any the user set
        if self._client.cookie:
            headers["Cookie"] = self._client.cookie
        if content_type is not None:
            headers["Content-Type"] = content_type
        # auth_settings() calls get_api_key_with_prefix, which runs refresh_api_key_hook
        for auth in self._cfg.auth_settings().values():
            if auth.get("in") == "header" and auth.get("value"):
                headers[auth["key"]] = _trimmed(auth["value"])
        return headers

    def _timeout(self, timeout: float) -> urllib3.Timeout:
        cached = self._timeouts.get(timeout)
        if cached is None:
            cached = self._timeouts[timeout] = urllib3.Timeout(total=timeout)
        return cached

    def _host_pool(self) -> Any:
        """The host's connection pool, or None when requests go through a proxy manager."""
        manager: Any = self._client.rest_client.pool_manager
        if isinstance(manager, urllib3.ProxyManager) or not isinstance(
            manager, urllib3.PoolManager
        ):
            return None
        pool = self._pool
        if pool is None or pool.pool is None:  # first use, or closed by PoolManager.clear()
            with self._pool_lock:
                pool = self._pool = manager.connection_from_url(self._cfg.host)
        return pool

    def _open(self, req: _Request, *, preload: bool) -> Any:
        payload = None if req.body is None else dumps(req.body)
        pool = self._host_pool()
        if pool is None:  # through the (proxy) manager: the full URL
            pool, target = self._client.rest_client.pool_manager, f"{self._cfg.host}{req.path}"
        else:
            target = f"{self._base}{req.path}"
        return pool.urlopen(
            req.method,
            f"{target}?{urlencode(req.query)}" if req.query else target,
            body=payload,
            headers=self._headers(req.content_type),
            timeout=self._timeout(req.timeout),
            retries=self._retries,
            redirect=False,
            preload_content=preload,
            assert_same_host=False,  # the target is the pool's own (a manager sets it too)
        )


class ClientTransport(Transport):
    """The official ``param_serialize`` + ``call_api`` path (see the module), on a pool with
    urllib3's own retries off (:func:`pool_without_retries`)."""

    name = "client"

    def __init__(self, api_client: k8s.ApiClient) -> None:
        self._client: Any = api_client
        pool_without_retries(api_client)

    def _open(self, req: _Request, *, preload: bool) -> Any:
        del preload  # call_api never preloads: the body is read from the urllib3 response
        headers = {"Accept": _JSON}
        if req.content_type is not None:
            headers["Content-Type"] = req.content_type
        request = self._client.param_serialize(
            req.method,
            req.path,
            query_params=list(req.query),
            header_params=headers,
            body=req.body,
            auth_settings=["BearerToken"],
        )
        method, url, header_params, *rest = request
        if isinstance(header_params.get(_AUTHORIZATION), str):
            header_params[_AUTHORIZATION] = _trimmed(header_params[_AUTHORIZATION])
        return self._client.call_api(
            method, url, header_params, *rest, _request_timeout=req.timeout
        ).response


def make_transport(api_client: k8s.ApiClient, transport: object) -> Transport:
    """The transport named ``transport`` over ``api_client`` (:class:`InvalidConfigError` for
    any other name)."""
    if transport == "lean":
        return LeanTransport(api_client)
    if transport == "client":
        return ClientTransport(api_client)
    raise InvalidConfigError(f"transport must be 'lean' or 'client', got {transport!r}")
