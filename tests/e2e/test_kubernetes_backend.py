"""KubernetesBackend driven through the real ``kubernetes`` client over real HTTP.

The server side is the in-memory apiserver served by ``ApiServerHTTP`` on 127.0.0.1, plus a
tiny canned-reply HTTP server for replies the emulator never produces (garbage, odd statuses).
Every test runs on both transports: ``lean`` (the default) and ``client`` (``call_api``).
"""

from __future__ import annotations

import contextlib
import gzip
import json
import logging
import socket
import threading
import traceback
from collections.abc import Iterator
from typing import Any, TypeVar

import pytest
import urllib3
from kubernetes import client as k8s
from loguru import logger

from kdispatch import (
    AlreadyExistsError,
    ApiBackend,
    ApiConnectionError,
    ApiError,
    BadResponseError,
    ConflictError,
    ForbiddenError,
    InvalidConfigError,
    InvalidRequestError,
    KubernetesBackend,
    NotFoundError,
    RequestTimeoutError,
    ServerError,
    TooManyRequestsError,
    UnauthorizedError,
    UnknownKindError,
    prepare_configuration,
)
from kdispatch.adapters.informer import ClientListWatch
from kdispatch.adapters.transport import TransportName
from kdispatch.testing import ApiServerHTTP, InMemoryApiServer, make_claim, make_node, make_pod
from tests.backends import nominate
from tests.concurrency import patch_from_threads
from tests.rawhttp import TricklingServer, read_request

TOKEN = "kd-t0ken-5ecret-value-9f8e7d"

pytestmark = pytest.mark.timeout(30)

_TRANSPORT: list[TransportName] = ["lean"]


@pytest.fixture(autouse=True, params=["lean", "client"])
def transport(request: pytest.FixtureRequest) -> Iterator[TransportName]:
    """Run the test with ``KubernetesBackend(transport=...)`` set to each transport."""
    _TRANSPORT[0] = request.param
    yield request.param
    _TRANSPORT[0] = "lean"


def _for_url(url: str, **kwargs: Any) -> KubernetesBackend:
    return KubernetesBackend.for_url(url, transport=_TRANSPORT[0], **kwargs)


@pytest.fixture
def http(server: InMemoryApiServer) -> Iterator[ApiServerHTTP]:
    with ApiServerHTTP(server, token=TOKEN, hang_seconds=10.0) as srv:
        yield srv


@pytest.fixture
def backend(http: ApiServerHTTP) -> Iterator[KubernetesBackend]:
    with _for_url(http.url, token=TOKEN, request_timeout=5.0) as b:
        yield b


E = TypeVar("E", bound=BaseException)


def _pod(server: InMemoryApiServer, name: str = "p1") -> tuple[str, str]:
    obj = server.create(make_pod(name))
    return obj["metadata"]["uid"], obj["metadata"]["resourceVersion"]


# --------------------------------------------------------------------------- construction


def test_is_an_api_backend_with_a_pool_sized_for_the_workers(http: ApiServerHTTP) -> None:
    with _for_url(http.url, workers=32, request_timeout=1.5) as b:
        assert isinstance(b, ApiBackend)
        cfg = b.api_client.configuration
        assert cfg.connection_pool_maxsize >= 32
        assert cfg.retries.total == 0  # the executor owns retries
        assert cfg.verify_ssl is True
        assert b.request_timeout == 1.5


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), "1", True])
def test_bad_request_timeout_rejected(http: ApiServerHTTP, bad: object) -> None:
    with pytest.raises(InvalidConfigError):
        _for_url(http.url, request_timeout=bad)


def test_bad_arguments_rejected_before_sending(
    backend: KubernetesBackend, server: InMemoryApiServer
) -> None:
    uid, _ = _pod(server)
    with pytest.raises(UnknownKindError):
        backend.get("Widget", "default", "p1")
    with pytest.raises(InvalidRequestError):
        backend.get("Pod", "Not_A_Namespace", "p1")
    with pytest.raises(InvalidRequestError):
        backend.get("Node", "default", "n1")
    with pytest.raises(InvalidRequestError):
        backend.bind("default", "p1", uid=uid, node="Bad Node")
    with pytest.raises(InvalidRequestError):
        backend.patch_status(
            "Pod",
            "default",
            "p1",
            {},
            uid=uid,
            resource_version=None,
            patch_type="json",  # type: ignore[arg-type]
        )
    with pytest.raises(InvalidRequestError):
        backend.delete("Pod", "default", "p1", uid=uid, grace_period_seconds=-1)
    assert server.request_log == []


# --------------------------------------------------------------------------- happy paths


def test_get_pod_node_and_claim(backend: KubernetesBackend, server: InMemoryApiServer) -> None:
    uid, rv = _pod(server)
    server.create(make_node("n1", 4000, 8192))
    claim = server.create(make_claim("c1"))
    pod = backend.get("Pod", "default", "p1")
    assert pod["kind"] == "Pod"
    assert pod["metadata"]["uid"] == uid
    assert pod["metadata"]["resourceVersion"] == rv
    assert backend.get("Node", "", "n1")["metadata"]["name"] == "n1"
    got = backend.get("ResourceClaim", "default", "c1")
    assert got["apiVersion"] == "resource.k8s.io/v1"
    assert got["metadata"]["uid"] == claim["metadata"]["uid"]


def test_strategic_patch_merges_conditions_by_type(
    backend: KubernetesBackend, server: InMemoryApiServer
) -> None:
    uid, rv = _pod(server)
    first = {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}
    out = backend.patch_status("Pod", "default", "p1", first, uid=uid, resource_version=rv)
    second = {
        "status": {
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
            "nominatedNodeName": "n1",
        }
    }
    out = backend.patch_status(
        "Pod", "default", "p1", second, uid=uid, resource_version=out["metadata"]["resourceVersion"]
    )
    types = {c["type"]: c["status"] for c in out["status"]["conditions"]}
    assert types == {"Ready": "False", "PodScheduled": "False"}
    assert out["status"]["nominatedNodeName"] == "n1"
    stored = server.get_object("Pod", "default", "p1")
    assert stored is not None and stored["status"] == out["status"]
    assert second == {  # the caller's patch is not mutated by adding preconditions
        "status": {
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
            "nominatedNodeName": "n1",
        }
    }


def test_claim_status_merge_patch(backend: KubernetesBackend, server: InMemoryApiServer) -> None:
    claim = server.create(make_claim("c1"))
    uid, rv = claim["metadata"]["uid"], claim["metadata"]["resourceVersion"]
    reserved = [{"resource": "pods", "name": "p1", "uid": "pod-uid-1"}]
    out = backend.patch_status(
        "ResourceClaim",
        "default",
        "c1",
        {"status": {"reservedFor": reserved, "allocation": {"devices": {"results": []}}}},
        uid=uid,
        resource_version=rv,
        patch_type="merge",
    )
    assert out["kind"] == "ResourceClaim"
    assert out["status"]["reservedFor"] == reserved
    # merge patch replaces lists whole and null deletes
    out = backend.patch_status(
        "ResourceClaim",
        "default",
        "c1",
        {"status": {"reservedFor": None}},
        uid=uid,
        resource_version=None,
        patch_type="merge",
    )
    stored = server.get_object("ResourceClaim", "default", "c1")
    assert stored is not None
    assert "reservedFor" not in stored["status"]
    assert stored["status"]["allocation"] == {"devices": {"results": []}}


def test_bind_checks_the_201_status(backend: KubernetesBackend, server: InMemoryApiServer) -> None:
    uid, _ = _pod(server)
    backend.bind("default", "p1", uid=uid, node="n1")
    stored = server.get_object("Pod", "default", "p1")
    assert stored is not None
    assert stored["spec"]["nodeName"] == "n1"
    assert [(r.op, r.outcome) for r in server.request_log] == [("bind", "ok")]


def test_delete_with_uid_precondition(
    backend: KubernetesBackend, server: InMemoryApiServer
) -> None:
    uid, _ = _pod(server)
    claim = server.create(make_claim("c1"))
    backend.delete("Pod", "default", "p1", uid=uid, grace_period_seconds=0)
    backend.delete("ResourceClaim", "default", "c1", uid=claim["metadata"]["uid"])
    assert server.get_object("Pod", "default", "p1") is None
    assert server.get_object("ResourceClaim", "default", "c1") is None
    with pytest.raises(NotFoundError):
        backend.delete("Pod", "default", "p1", uid=uid)


# --------------------------------------------------------------------------- error mapping


def test_not_found(backend: KubernetesBackend) -> None:
    for call in (
        lambda: backend.get("Pod", "default", "nope"),
        lambda: backend.patch_status("Pod", "default", "nope", {}, uid="u", resource_version=None),
        lambda: backend.bind("default", "nope", uid="u", node="n1"),
        lambda: backend.delete("Pod", "default", "nope", uid="u"),
    ):
        with pytest.raises(NotFoundError) as info:
            call()
        assert info.value.status == 404
        assert not info.value.retryable


def test_conflicts_on_uid_and_resource_version(
    backend: KubernetesBackend, server: InMemoryApiServer
) -> None:
    uid, rv = _pod(server)
    patch = {"status": {"nominatedNodeName": "n1"}}
    with pytest.raises(ConflictError) as info:
        backend.patch_status("Pod", "default", "p1", patch, uid="other-uid", resource_version=None)
    assert "metadata.uid" in str(info.value)  # 422 "field is immutable", mapped to a conflict
    backend.patch_status("Pod", "default", "p1", patch, uid=uid, resource_version=rv)
    with pytest.raises(ConflictError) as info:  # rv is stale now
        nominate(backend, "p1", "n2", uid=uid, resource_version=rv)
    assert not isinstance(info.value, AlreadyExistsError)
    assert "has been modified" in str(info.value)
    with pytest.raises(ConflictError):
        backend.bind("default", "p1", uid="other-uid", node="n1")
    with pytest.raises(ConflictError):
        backend.delete("Pod", "default", "p1", uid="other-uid")
    stored = server.get_object("Pod", "default", "p1")
    assert stored is not None and stored["status"]["nominatedNodeName"] == "n1"


def test_double_binding_conflicts(backend: KubernetesBackend, server: InMemoryApiServer) -> None:
    uid, _ = _pod(server)
    backend.bind("default", "p1", uid=uid, node="n1")
    with pytest.raises(ConflictError) as info:
        backend.bind("default", "p1", uid=uid, node="n2")
    assert info.value.status == 409
    assert "already assigned" in str(info.value)
    stored = server.get_object("Pod", "default", "p1")
    assert stored is not None and stored["spec"]["nodeName"] == "n1"


def _scripted_bind_fails(
    backend: KubernetesBackend, server: InMemoryApiServer, uid: str, fault: Any, raises: type[E]
) -> E:
    """The server answers the next binding of p1 with ``fault`` (see ``server.script``): the
    backend raises ``raises``, which is returned."""
    server.script("bind", fault)
    with pytest.raises(raises) as info:
        backend.bind("default", "p1", uid=uid, node="n1")
    return info.value


def test_429_carries_retry_after(backend: KubernetesBackend, server: InMemoryApiServer) -> None:
    uid, _ = _pod(server)
    error = _scripted_bind_fails(backend, server, uid, "429", TooManyRequestsError)
    assert error.retryable
    assert error.retry_after == pytest.approx(0.05)
    slow_down = TooManyRequestsError("slow down", retry_after=3)
    assert (
        _scripted_bind_fails(backend, server, uid, slow_down, TooManyRequestsError).retry_after
        == 3.0
    )
    backend.bind("default", "p1", uid=uid, node="n1")  # then it goes through


def test_500_is_retryable(backend: KubernetesBackend, server: InMemoryApiServer) -> None:
    uid, _ = _pod(server)
    server.script("patch_status", "500")
    with pytest.raises(ServerError) as info:
        backend.patch_status("Pod", "default", "p1", {"status": {}}, uid=uid, resource_version=None)
    assert info.value.status == 500
    assert info.value.retryable


def test_client_timeout_when_the_server_hangs(server: InMemoryApiServer) -> None:
    uid, _ = _pod(server)
    with (
        ApiServerHTTP(server, hang_seconds=20.0) as srv,
        _for_url(srv.url, request_timeout=0.3) as b,
    ):
        server.script("get", "timeout")
        with pytest.raises(RequestTimeoutError) as info:
            b.get("Pod", "default", "p1")
        assert info.value.retryable
        # apply_then_fail: the change is applied, the reply never arrives
        server.script("patch_status", "apply_then_fail")
        with pytest.raises(RequestTimeoutError):
            nominate(b, "p1", "n9", uid=uid)
        stored = server.get_object("Pod", "default", "p1")
        assert stored is not None and stored["status"]["nominatedNodeName"] == "n9"
        assert b.get("Pod", "default", "p1")["metadata"]["name"] == "p1"  # the pool recovers


def test_request_timeout_bounds_the_whole_reply_when_the_server_trickles_it() -> None:
    """A server that keeps sending its reply a byte at a time never lets a single wait for
    data run out; ``request_timeout`` still ends the request (the old per-wait bound read
    the whole 20 s reply), the half-read connection is closed, and the next request works."""
    pod = json.dumps(make_pod("p1", uid="u1")).encode()
    body = pod + b" " * max(0, 400 - len(pod))  # 400 bytes: 20 s at the server's pace
    with TricklingServer(body) as srv, _for_url(srv.url, request_timeout=0.5) as b:
        with pytest.raises(RequestTimeoutError) as info:
            b.get("Pod", "default", "p1")
        assert info.value.retryable
        assert srv.hung_up.wait(10), "the client kept the trickling connection open"
        assert b.get("Pod", "default", "p1")["metadata"]["uid"] == "u1"


def test_504_reply_is_a_timeout(server: InMemoryApiServer) -> None:
    _pod(server)
    with (
        ApiServerHTTP(server, timeout_reply="504") as srv,
        _for_url(srv.url, request_timeout=2.0) as b,
    ):
        server.script("get", "timeout")
        with pytest.raises(RequestTimeoutError) as info:
            b.get("Pod", "default", "p1")
        assert info.value.status == 504


def test_connection_reset(backend: KubernetesBackend, server: InMemoryApiServer) -> None:
    uid, _ = _pod(server)
    assert _scripted_bind_fails(backend, server, uid, "conn_reset", ApiConnectionError).retryable
    backend.bind("default", "p1", uid=uid, node="n1")


def test_connection_refused() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    with (
        _for_url(url, request_timeout=2.0) as b,
        pytest.raises(ApiConnectionError),
    ):
        b.get("Pod", "default", "p1")


def test_unauthorized_is_permanent(http: ApiServerHTTP, server: InMemoryApiServer) -> None:
    _pod(server)
    with (
        _for_url(http.url, token="wrong-token", request_timeout=2.0) as b,
        pytest.raises(UnauthorizedError) as info,
    ):
        b.get("Pod", "default", "p1")
    assert info.value.status == 401
    assert not info.value.retryable


def test_shared_client_under_parallel_workers(
    http: ApiServerHTTP, server: InMemoryApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    workers = 8
    uids = [_pod(server, f"p{i}")[0] for i in range(workers)]
    caplog.set_level(logging.WARNING, logger="urllib3")
    with _for_url(http.url, token=TOKEN, workers=workers) as b:
        errors = patch_from_threads(b, "default", uids, rounds=15)
    assert errors == []
    for i in range(workers):
        stored = server.get_object("Pod", "default", f"p{i}")
        assert stored is not None and stored["status"]["nominatedNodeName"] == "n14"
    assert "Connection pool is full" not in caplog.text
    assert http.open_connections <= workers


# --------------------------------------------------------------------------- canned replies


class CannedServer:
    """Answers each request with the next canned raw reply, one connection per request."""

    def __init__(self, replies: list[bytes]) -> None:
        self._replies = list(replies)
        self.served = 0  # connections accepted (one request each)
        self.requests: list[bytes] = []  # each request's head and body, as read
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._thread = threading.Thread(target=self._serve, name="canned-http")
        self._thread.start()

    def _serve(self) -> None:
        for reply in self._replies:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            with conn:
                self.served += 1
                self.requests.append(read_request(conn))
                conn.sendall(reply)  # b"": closed without a reply

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        self._thread.join(5)


def _reply(code: int, body: bytes, *headers: str) -> bytes:
    head = [f"HTTP/1.1 {code} X", f"Content-Length: {len(body)}", "Connection: close", *headers]
    if not any(h.lower().startswith("content-type") for h in headers):
        head.append("Content-Type: application/json")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


@contextlib.contextmanager
def canned(*replies: bytes) -> Iterator[KubernetesBackend]:
    srv = CannedServer(list(replies))
    try:
        with _for_url(srv.url, request_timeout=2.0) as b:
            yield b
    finally:
        srv.close()


def test_a_client_list_watch_asks_for_bookmarks_from_its_resource_version() -> None:
    """An informer's watch asks for bookmarks (``allowWatchBookmarks=true``: kube-apiserver
    then moves the resourceVersion it resumes from along while nothing changes) and resumes
    from the resourceVersion it is given."""
    srv = CannedServer([_reply(200, b"")])
    try:
        with _for_url(srv.url, request_timeout=2.0) as backend:
            assert list(ClientListWatch(backend, "Pod", "ns1").watch("57", 30)) == []
    finally:
        srv.close()
    line = srv.requests[0].split(b"\r\n")[0].decode()
    method, target, _ = line.split(" ")
    path, _, query = target.partition("?")
    assert (method, path) == ("GET", "/api/v1/namespaces/ns1/pods")
    assert {"allowWatchBookmarks=true", "resourceVersion=57"} <= set(query.split("&"))


def test_replies_compressed_chunked_or_in_pieces_are_read_whole() -> None:
    """The body of a reply is read to its end however it comes: gzip-compressed (decoded),
    chunked without a length, or sent in pieces with a pause between them."""
    pod = json.dumps(make_pod("p1", uid="u1")).encode()
    packed = gzip.compress(pod)
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (pod[:100], pod[100:]))
    head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
    with canned(
        _reply(200, packed, "Content-Encoding: gzip"),
        (head + "Transfer-Encoding: chunked\r\n\r\n").encode() + chunked + b"0\r\n\r\n",
    ) as b:
        for _ in range(2):
            assert b.get("Pod", "default", "p1") == json.loads(pod)
    with TricklingServer(pod, pace=0.001) as srv, _for_url(srv.url, request_timeout=30) as b:
        assert b.get("Pod", "default", "p1") == json.loads(pod)  # a byte at a time, in time


def test_binding_reply_variants() -> None:
    ok_status = b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success","code":201}'
    binding = (
        b'{"kind":"Binding","apiVersion":"v1","metadata":{"name":"p1"},"target":{"name":"n1"}}'
    )
    failure = b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","code":201}'
    with canned(
        _reply(201, ok_status),
        _reply(200, binding),
        _reply(201, failure),
        _reply(201, b"<html>proxy</html>", "Content-Type: text/html"),
        _reply(202, ok_status),
        _reply(201, b'["not", "an", "object"]'),
    ) as b:
        b.bind("default", "p1", uid="u1", node="n1")
        b.bind("default", "p1", uid="u1", node="n1")
        for _ in range(4):
            with pytest.raises(BadResponseError):
                b.bind("default", "p1", uid="u1", node="n1")


def test_a_redirect_is_a_bad_response_and_is_not_followed() -> None:
    pod = b'{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p1","uid":"u1"}}'
    with canned(_reply(307, b"", "Location: /moved"), _reply(200, pod)) as b:
        with pytest.raises(BadResponseError) as info:
            b.get("Pod", "default", "p1")
        assert not info.value.retryable and not info.value.ambiguous


def test_a_callers_own_api_client_is_sent_without_urllib3_retries() -> None:
    srv = CannedServer([b""] * 4)  # each connection closed without a reply
    try:
        api_client = k8s.ApiClient(k8s.Configuration(host=srv.url))  # retries not switched off
        with (
            KubernetesBackend(
                api_client, transport=_TRANSPORT[0], request_timeout=2.0, owns_client=True
            ) as b,
            pytest.raises(ApiConnectionError),
        ):
            b.delete("Pod", "default", "p1", uid="u1")
    finally:
        srv.close()
    assert srv.served == 1  # the executor owns the retries: one request per attempt


def test_prepare_configuration_sizes_the_pool_and_switches_urllib3_retries_off() -> None:
    """A Configuration built by hand and prepared: the official client's own call through it
    is sent once (the executor owns the retries), and its pool holds a connection per worker."""
    srv = CannedServer([b""] * 4)  # each connection closed without a reply
    try:
        cfg = prepare_configuration(k8s.Configuration(host=srv.url), 16)
        assert cfg.connection_pool_maxsize >= 16
        with k8s.ApiClient(cfg) as api_client, pytest.raises(urllib3.exceptions.HTTPError):
            k8s.CoreV1Api(api_client).read_namespaced_pod("p1", "default", _request_timeout=2)
    finally:
        srv.close()
    assert srv.served == 1


def test_garbage_and_wrong_kind_replies() -> None:
    with canned(
        _reply(200, b"{truncated"),
        _reply(200, b'{"kind":"Node","metadata":{"name":"p1"}}'),
        _reply(200, b"\xff\xfe"),
        _reply(200, b'{"kind":"Pod"}'),
    ) as b:
        for _ in range(4):
            with pytest.raises(BadResponseError):
                b.get("Pod", "default", "p1")


def _status(code: int, reason: str, details: str = "") -> bytes:
    extra = f',"details":{details}' if details else ""
    return (
        f'{{"kind":"Status","apiVersion":"v1","metadata":{{}},"status":"Failure",'
        f'"message":"m","reason":"{reason}","code":{code}{extra}}}'
    ).encode()


@pytest.mark.parametrize(
    ("reply", "error", "status", "retryable"),
    [
        (_reply(409, _status(409, "AlreadyExists")), AlreadyExistsError, 409, False),
        (_reply(409, _status(409, "Conflict")), ConflictError, 409, False),
        (_reply(400, _status(400, "BadRequest")), InvalidRequestError, 400, False),
        (_reply(401, _status(401, "Unauthorized")), UnauthorizedError, 401, False),
        (_reply(403, _status(403, "Forbidden")), ForbiddenError, 403, False),
        (_reply(422, _status(422, "Invalid")), InvalidRequestError, 422, False),
        (_reply(503, b"upstream down", "Content-Type: text/plain"), ServerError, 503, True),
        (_reply(502, b""), ServerError, 502, True),
        (_reply(504, _status(504, "Timeout")), RequestTimeoutError, 504, True),
        (_reply(429, _status(429, "TooManyRequests")), TooManyRequestsError, 429, True),
    ],
)
def test_status_mapping(reply: bytes, error: type[ApiError], status: int, retryable: bool) -> None:
    with canned(reply) as b, pytest.raises(error) as info:
        b.patch_status("Pod", "default", "p1", {"status": {}}, uid="u1", resource_version="7")
    assert type(info.value) is error
    assert info.value.status == status
    assert info.value.retryable is retryable


def test_retry_after_from_status_details_or_header() -> None:
    details = '{"name":"p1","kind":"pods","retryAfterSeconds":4}'
    with canned(
        _reply(429, _status(429, "TooManyRequests", details)),
        _reply(429, _status(429, "TooManyRequests", details), "Retry-After: 2"),
        _reply(429, b"", "Retry-After: Wed, 21 Oct 2015 07:28:00 GMT"),
    ) as b:
        waits = []
        for _ in range(3):
            with pytest.raises(TooManyRequestsError) as info:
                b.get("Pod", "default", "p1")
            waits.append(info.value.retry_after)
    assert waits == [4.0, 2.0, 0.0]


# --------------------------------------------------------------------------- secrets


def _all_text(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc)) + repr(exc) + repr(exc.__cause__)


def test_bearer_token_never_in_errors_or_logs(
    server: InMemoryApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    uid, _ = _pod(server)
    caplog.set_level(logging.DEBUG)
    lines: list[str] = []
    logger.enable("kdispatch")
    sink = logger.add(lines.append, level="TRACE", format="{message} {extra}")
    texts: list[str] = []
    try:
        with (
            ApiServerHTTP(server, token=TOKEN, hang_seconds=20.0) as srv,
            _for_url(srv.url, token=TOKEN, request_timeout=0.3) as b,
        ):
            texts.append(repr(b))
            b.bind("default", "p1", uid=uid, node="n1")
            for op, fault in (
                ("get", "timeout"),
                ("get", "conn_reset"),
                ("get", "429"),
                ("get", "500"),
            ):
                server.script(op, fault)
                with pytest.raises(ApiError) as info:
                    b.get("Pod", "default", "p1")
                texts.append(_all_text(info.value))
            for call in (
                lambda: b.get("Pod", "default", "missing"),
                lambda: b.bind("default", "p1", uid=uid, node="n2"),
            ):
                with pytest.raises(ApiError) as info:
                    call()
                texts.append(_all_text(info.value))
        with (
            ApiServerHTTP(server, token="another-token") as srv,
            _for_url(srv.url, token=TOKEN, request_timeout=2.0) as b,
        ):
            with pytest.raises(InvalidRequestError) as info:
                b.get("Pod", "default", "p1")
            texts.append(_all_text(info.value))
    finally:
        logger.remove(sink)
        logger.disable("kdispatch")
    assert len(texts) == 8
    assert any("bound" in line for line in lines)  # the sink did see the backend's logs
    for text in [*texts, *lines, caplog.text]:
        assert TOKEN not in text


# --------------------------------------------------------------------------- configuration


def test_pool_resized_after_use_keeps_working(
    http: ApiServerHTTP, server: InMemoryApiServer
) -> None:
    _pod(server)
    with _for_url(http.url, token=TOKEN, workers=2) as b:
        assert b.get("Pod", "default", "p1")["metadata"]["name"] == "p1"
        b.size_pool(64)  # closes the open pools; the next request opens a bigger one
        assert b.api_client.configuration.connection_pool_maxsize == 64
        assert b.get("Pod", "default", "p1")["metadata"]["name"] == "p1"


def test_configuration_proxy_and_host_path_are_honoured(
    http: ApiServerHTTP, server: InMemoryApiServer
) -> None:
    _pod(server)
    cfg = k8s.Configuration(host="http://apiserver.invalid")  # only the proxy can reach it
    cfg.proxy = http.url  # the emulator answers absolute-URI (proxy) requests too
    cfg.api_key = {"authorization": TOKEN}
    cfg.api_key_prefix = {"authorization": "Bearer"}
    with KubernetesBackend(
        k8s.ApiClient(prepare_configuration(cfg, 2)), transport=_TRANSPORT[0], owns_client=True
    ) as b:
        assert b.get("Pod", "default", "p1")["metadata"]["name"] == "p1"
    with _for_url(f"{http.url}/some/prefix", token=TOKEN) as b, pytest.raises(NotFoundError):
        b.get("Pod", "default", "p1")  # sent under the prefix, which the emulator does not serve


def test_token_refresh_hook_runs_for_every_request(
    http: ApiServerHTTP, server: InMemoryApiServer
) -> None:
    _pod(server)
    refreshed: list[int] = []
    cfg = k8s.Configuration(host=http.url)

    def refresh(conf: Any) -> None:
        refreshed.append(1)
        conf.api_key = {"authorization": TOKEN}
        conf.api_key_prefix = {"authorization": "Bearer"}

    cfg.refresh_api_key_hook = refresh  # type: ignore[assignment]
    cfg.api_key = {"authorization": "expired"}
    with KubernetesBackend(
        k8s.ApiClient(prepare_configuration(cfg, 2)), transport=_TRANSPORT[0], owns_client=True
    ) as b:
        for _ in range(3):
            assert b.get("Pod", "default", "p1")["metadata"]["name"] == "p1"
    assert len(refreshed) >= 3


@pytest.mark.parametrize(
    "kwargs",
    [{"workers": 0}, {"workers": True}, {"transport": "fast"}, {"request_timeout": -1}],
)
def test_bad_backend_configuration_is_a_config_error(
    http: ApiServerHTTP, kwargs: dict[str, Any]
) -> None:
    with pytest.raises(InvalidConfigError):
        KubernetesBackend.for_url(http.url, **kwargs)
    with pytest.raises(InvalidConfigError):
        KubernetesBackend.for_url("ftp://example.com")
    with pytest.raises(InvalidConfigError):
        KubernetesBackend("not a client")  # type: ignore[arg-type]
