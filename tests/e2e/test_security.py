"""Security: credentials stay secret, TLS stays verified, patches cannot be injected into.

* A bearer token configured in :class:`KubernetesBackend` never shows up in logs (loguru for
  ``actors``/``adapters`` at TRACE with tracebacks and variable values, and stdlib logging at
  DEBUG for the client and urllib3) nor in any exception, its causes or its traceback — under
  401, 403, 500, connection resets, timeouts and refused connections.
* TLS verification is on unless the user turns it off; a self-signed server is refused and a
  server whose CA the user supplied is accepted.
* Requests are built structurally: hostile names are rejected by validation before anything is
  sent, and hostile condition texts (quotes, JSON, unicode, control characters) round-trip
  verbatim over HTTP without changing anything else.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import socket
import ssl
import subprocess
import threading
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from loguru import logger

from kdispatch.actors.facade.dispatcher import Dispatcher
from kdispatch.actors.model.errors import (
    ApiConnectionError,
    ApiError,
    CallFailed,
    InvalidCallError,
    InvalidConfigError,
    InvalidObjectError,
    InvalidRequestError,
    NotFoundError,
    Outcome,
    UnauthorizedError,
)
from kdispatch.actors.model.pod_calls import PodBinding, PodPreemption, PodStatusPatch
from kdispatch.adapters.informer import ClientListWatch, Informer
from kdispatch.adapters.kubernetes import KubernetesBackend
from kdispatch.testing.httpserver import ApiServerHTTP
from kdispatch.testing.memory import InMemoryApiServer, make_pod
from tests.configs import fast
from tests.rawhttp import read_request

pytestmark = pytest.mark.timeout(60)

TOKEN = "kd-SECRET-7f3a9c1e5b2d4f6a8c0e"
SERVER_TOKEN = "kd-other-token-0000"
CONFIG = fast(max_attempts=2)


@pytest.fixture
def captured(caplog: pytest.LogCaptureFixture) -> Iterator[list[str]]:
    """Everything logged while the test runs: loguru (library loggers enabled, TRACE, with
    tracebacks and their variable values) and stdlib logging at DEBUG."""
    lines: list[str] = []
    sink = logger.add(
        lambda message: lines.append(str(message)),
        level="TRACE",
        format="{level} {name} {message} {extra} {exception}",
        backtrace=True,
        diagnose=True,
    )
    logger.enable("kdispatch")
    caplog.set_level(logging.DEBUG)
    try:
        yield lines
    finally:
        logger.disable("kdispatch")
        logger.remove(sink)
        lines.extend(r.getMessage() for r in caplog.records)
        lines.extend(caplog.text.splitlines())


def exception_texts(exc: BaseException) -> list[str]:
    """str, repr and the formatted traceback of ``exc`` and of every cause/context."""
    out: list[str] = []
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        out += [str(cur), repr(cur), *traceback.format_exception(cur)]
        if isinstance(cur, CallFailed) and cur.cause is not None:
            out += exception_texts(cur.cause)
        cur = cur.__cause__ or cur.__context__
    return out


def assert_secret(texts: list[str]) -> None:
    leaked = [t for t in texts if TOKEN in t]
    assert not leaked, leaked[:3]


# --------------------------------------------------------------------------- tokens


def test_a_rejected_token_appears_in_no_log_and_no_exception(
    server: InMemoryApiServer, captured: list[str]
) -> None:
    pod = server.create(make_pod("p1"))
    texts: list[str] = []
    with (
        ApiServerHTTP(server, token=SERVER_TOKEN) as http,
        KubernetesBackend.for_url(http.url, token=TOKEN, request_timeout=2.0) as backend,
    ):
        with pytest.raises(InvalidRequestError) as info:
            backend.get("Pod", "default", "p1")  # 401
        assert info.value.status == 401
        texts += exception_texts(info.value)
        with Dispatcher(backend, CONFIG) as d:
            exc = d.submit(PodBinding.for_pod(pod, "n1")).exception(timeout=10)
            assert isinstance(exc, CallFailed)
            texts += exception_texts(exc)
        informer = Informer(
            ClientListWatch(backend.api_client, "Pod"), name="denied", backoff_initial=0.01
        )
        informer.start()
        with pytest.raises(UnauthorizedError):  # every list is refused, and it says why
            informer.wait_for_sync(10)
        assert isinstance(informer.last_error, UnauthorizedError)
        texts += exception_texts(informer.last_error)
        assert informer.stop(timeout=10)
    texts += [repr(backend)]
    assert any("401" in t for t in texts)
    assert_secret(texts)
    assert_secret(captured)
    assert any("failed" in line for line in captured)  # the logs did record the failures


@pytest.mark.parametrize(
    "fault",
    [
        InvalidRequestError("forbidden: user cannot patch pods/status", status=403),
        "500",
        "conn_reset",
        "timeout",
    ],
    ids=["403", "500", "conn-reset", "timeout"],
)
def test_a_valid_token_stays_secret_through_server_and_transport_errors(
    server: InMemoryApiServer, captured: list[str], fault: Any
) -> None:
    pod = server.create(make_pod("p1"))
    for _ in range(2):  # max_attempts: every attempt fails
        server.script("patch_status", fault, name="p1")
    cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    with (
        ApiServerHTTP(server, token=TOKEN, hang_seconds=5.0) as http,
        KubernetesBackend.for_url(http.url, token=TOKEN, request_timeout=0.3) as backend,
        Dispatcher(backend, CONFIG) as d,
    ):
        exc = d.submit(PodStatusPatch.for_pod(pod, conditions=[cond])).exception(timeout=20)
        assert isinstance(exc, CallFailed) and isinstance(exc.cause, ApiError)
        # the same token works: the failures were the faults, not authentication
        assert d.submit(PodBinding.for_pod(pod, "n1")).result(timeout=10) is Outcome.SUCCESS
    assert_secret(exception_texts(exc))
    assert_secret(captured)
    assert any("bound" in line for line in captured)  # the library's debug logs were captured


@pytest.mark.parametrize("transport", ["lean", "client"])
def test_a_token_no_header_may_carry_is_refused_without_revealing_it(
    server: InMemoryApiServer, captured: list[str], transport: Any
) -> None:
    """A token with a line break inside (the one ending a file is trimmed): http.client
    refuses the header and quotes it; the backend's error, its causes, the call's failure and
    the logs do not."""
    pod = server.create(make_pod("p1"))
    with (
        ApiServerHTTP(server, token=TOKEN) as http,
        KubernetesBackend.for_url(
            http.url, token=f"{TOKEN}\r\nX-Injected: 1", request_timeout=2.0, transport=transport
        ) as backend,
    ):
        with pytest.raises(InvalidConfigError, match="not a valid HTTP header value") as info:
            backend.get("Pod", "default", "p1")
        texts = exception_texts(info.value)
        with Dispatcher(backend, CONFIG) as d:
            exc = d.submit(PodBinding.for_pod(pod, "n1")).exception(timeout=10)
            assert isinstance(exc, CallFailed)
            texts += exception_texts(exc)
    assert_secret(texts)
    assert_secret(captured)


def test_a_refused_connection_does_not_reveal_the_token(captured: list[str]) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with (
        KubernetesBackend.for_url(
            f"http://127.0.0.1:{port}", token=TOKEN, request_timeout=2.0
        ) as backend,
        pytest.raises(ApiConnectionError) as info,
    ):
        backend.get("Pod", "default", "p1")
    assert_secret(exception_texts(info.value))
    assert_secret(captured)


# --------------------------------------------------------------------------- TLS


KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: https://127.0.0.1:6443
{extra}users:
- name: u
  user:
    token: {token}
contexts:
- name: ctx
  context:
    cluster: c
    user: u
current-context: ctx
"""


def test_tls_verification_is_on_by_default() -> None:
    with KubernetesBackend.for_url("https://127.0.0.1:6443", token=TOKEN) as backend:
        assert backend.api_client.configuration.verify_ssl is True


@pytest.mark.parametrize(("insecure", "verified"), [(False, True), (True, False)])
def test_kubeconfig_keeps_verification_unless_the_user_turns_it_off(
    tmp_path: Path, insecure: bool, verified: bool
) -> None:
    extra = "    insecure-skip-tls-verify: true\n" if insecure else ""
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG.format(extra=extra, token=TOKEN))
    with KubernetesBackend.from_kubeconfig(str(path)) as backend:
        cfg = backend.api_client.configuration
        assert cfg.verify_ssl is verified
        assert TOKEN not in repr(backend)


@pytest.fixture
def self_signed(tmp_path: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 signed by itself (cert, key)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


class _TlsServer:
    """Answers every request with a 404 ``Status`` over TLS; runs on its own thread."""

    BODY = b'{"kind":"Status","apiVersion":"v1","status":"Failure","code":404,"reason":"NotFound"}'
    REPLY = (
        b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(BODY)}\r\nConnection: close\r\n\r\n".encode()
        + BODY
    )

    def __init__(self, cert: Path, key: Path) -> None:
        self._ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._ctx.load_cert_chain(str(cert), str(key))
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"https://127.0.0.1:{self._sock.getsockname()[1]}"
        self.handshakes_failed = 0
        self._thread = threading.Thread(target=self._serve, name="tls-server", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return  # closed
            with conn, contextlib.suppress(OSError):
                conn.settimeout(5)
                try:
                    tls = self._ctx.wrap_socket(conn, server_side=True)
                except ssl.SSLError:
                    self.handshakes_failed += 1
                    continue
                with tls:
                    read_request(tls)
                    tls.sendall(self.REPLY)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        self._thread.join(10)


def test_a_self_signed_server_is_refused_and_a_supplied_ca_accepted(
    self_signed: tuple[Path, Path], captured: list[str]
) -> None:
    cert, key = self_signed
    server = _TlsServer(cert, key)
    try:
        with KubernetesBackend.for_url(server.url, token=TOKEN, request_timeout=5.0) as backend:
            with pytest.raises(ApiConnectionError) as info:
                backend.get("Pod", "default", "p1")
            assert "SSL" in str(info.value)
            assert_secret(exception_texts(info.value))
        with KubernetesBackend.for_url(
            server.url, token=TOKEN, ca_cert=str(cert), request_timeout=5.0
        ) as trusted:
            assert trusted.api_client.configuration.verify_ssl is True
            with pytest.raises(NotFoundError):  # the handshake passed: the server answered
                trusted.get("Pod", "default", "p1")
    finally:
        server.close()
    assert server.handshakes_failed >= 1
    assert_secret(captured)


# --------------------------------------------------------------------------- structural patches


HOSTILE_NAMES = [
    'a","status":{"phase":"Hacked"}',
    "a\nb",
    "../../nodes/n1",
    "p1/status",
    "p1?dryRun=All",
    "p1%2Fbinding",
    "p1\x00",
    "\uff50\uff11",  # fullwidth "p1"
]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_hostile_object_names_are_rejected_before_anything_is_sent(
    server: InMemoryApiServer, name: str
) -> None:
    pod = make_pod("p1")
    pod["metadata"]["name"] = name
    pod["metadata"]["uid"] = "uid-1"
    with pytest.raises(InvalidObjectError):
        PodBinding.for_pod(pod, "n1")
    with pytest.raises(InvalidObjectError):
        PodStatusPatch.for_pod(pod, nominated_node_name="n1")
    with KubernetesBackend.for_url("http://127.0.0.1:9", request_timeout=1.0) as backend:
        with pytest.raises(InvalidRequestError):  # the backend re-checks, too
            backend.bind("default", name, uid="uid-1", node="n1")
        with pytest.raises(InvalidRequestError):
            backend.patch_status(
                "Pod", "default", name, {"status": {}}, uid="uid-1", resource_version=None
            )
    assert server.request_log == []


@pytest.mark.parametrize("node", ['n1","x":"y', "n1/../n2", "N1", "n1 ", "n1\r\nHost: evil"])
def test_hostile_node_names_are_rejected(server: InMemoryApiServer, node: str) -> None:
    pod = server.create(make_pod("p1"))
    with pytest.raises(InvalidCallError):
        PodBinding.for_pod(pod, node)
    with pytest.raises(InvalidCallError):
        PodStatusPatch.for_pod(pod, nominated_node_name=node)


HOSTILE_TEXTS = [
    '"}],"phase":"Hacked","conditions":[{"type":"x',
    '{"status": {"phase": "Failed"}}',
    'quotes \' " and backslashes \\ \\" \\\\',
    "unicode: ünïcødé — 日本語 — 🚀 — RTL \u202e — zero width \u200b",
    "newlines\nand\ttabs\r\nand a NUL \x00 and \x1f",
    "<script>alert(1)</script> & %s %(x)s {0} ${HOME} `id`",
    "x" * 10_000,
]


@pytest.fixture
def over_http(server: InMemoryApiServer) -> Iterator[tuple[KubernetesBackend, Dispatcher]]:
    with (
        ApiServerHTTP(server, token=TOKEN) as http,
        KubernetesBackend.for_url(http.url, token=TOKEN) as backend,
        Dispatcher(backend, CONFIG) as d,
    ):
        yield backend, d


@pytest.mark.parametrize("text", HOSTILE_TEXTS, ids=range(len(HOSTILE_TEXTS)))
def test_hostile_condition_texts_round_trip_verbatim_over_http(
    server: InMemoryApiServer, over_http: tuple[KubernetesBackend, Dispatcher], text: str
) -> None:
    backend, d = over_http
    pod = server.create(make_pod("p1"))
    before = server.get_object("Pod", "default", "p1")
    cond = {"type": "example.com/Hostile", "status": "False", "reason": "Hostile", "message": text}
    patch = PodStatusPatch.for_pod(pod, conditions=[cond])
    assert d.submit(patch).result(timeout=10) is Outcome.SUCCESS
    for stored in (server.get_object("Pod", "default", "p1"), backend.get("Pod", "default", "p1")):
        assert stored is not None and before is not None
        [written] = stored["status"]["conditions"]
        assert written["message"] == text
        assert {k: written[k] for k in ("type", "status", "reason")} == {
            k: cond[k] for k in ("type", "status", "reason")
        }
        # nothing else changed: no injected phase, field or condition
        assert {k: v for k, v in stored["status"].items() if k != "conditions"} == {
            k: v for k, v in before["status"].items() if k != "conditions"
        }
        assert stored["spec"] == before["spec"]


@pytest.mark.parametrize(
    "hostile_type", ['PodScheduled","status":"True', "Ready\n", "a\"b'c\\d", "ünï/cødé"]
)
def test_hostile_condition_types_and_reasons_are_data_not_structure(
    server: InMemoryApiServer, over_http: tuple[KubernetesBackend, Dispatcher], hostile_type: str
) -> None:
    backend, d = over_http
    pod = server.create(make_pod("p1"))
    cond = {"type": hostile_type, "status": "Unknown", "reason": hostile_type}
    assert d.submit(PodStatusPatch.for_pod(pod, conditions=[cond])).result(10) is Outcome.SUCCESS
    stored = backend.get("Pod", "default", "p1")
    assert [(c["type"], c["status"], c["reason"]) for c in stored["status"]["conditions"]] == [
        (hostile_type, "Unknown", hostile_type)
    ]
    assert stored["status"]["phase"] == "Pending"


def test_hostile_preemption_message_is_sent_as_data(
    server: InMemoryApiServer, over_http: tuple[KubernetesBackend, Dispatcher]
) -> None:
    _backend, d = over_http
    victim = server.create(make_pod("victim"))
    message = HOSTILE_TEXTS[0] + HOSTILE_TEXTS[3]
    preemption = PodPreemption.for_pod(victim, message=message)
    assert preemption.condition is not None and preemption.condition["message"] == message
    assert d.submit(preemption).result(timeout=10) is Outcome.SUCCESS
    assert server.get_object("Pod", "default", "victim") is None
    assert [r.outcome for r in server.request_log if r.op in ("patch_status", "delete")] == [
        "ok",
        "ok",
    ]


@pytest.mark.parametrize("uid", ['u-1","name":"other', "u/1"])
@pytest.mark.parametrize("request_name", ["bind", "delete", "evict", "patch_status"])
def test_the_backend_refuses_a_malformed_uid_before_sending(
    server: InMemoryApiServer,
    over_http: tuple[KubernetesBackend, Dispatcher],
    request_name: str,
    uid: str,
) -> None:
    """docs/security.md: UIDs are checked when a call is built and again by the backend, so
    a backend called directly refuses a malformed UID precondition before anything is sent."""
    backend, _d = over_http
    server.create(make_pod("web-1"))
    send: Callable[[], object] = {
        "bind": lambda: backend.bind("default", "web-1", uid=uid, node="n1"),
        "delete": lambda: backend.delete("Pod", "default", "web-1", uid=uid),
        "evict": lambda: backend.evict("default", "web-1", uid=uid),
        "patch_status": lambda: backend.patch_status(
            "Pod", "default", "web-1", {"status": {}}, uid=uid, resource_version=None
        ),
    }[request_name]
    with pytest.raises(InvalidRequestError, match="uid precondition"):
        send()
    assert server.request_log == []
