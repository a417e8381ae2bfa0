"""ApiServerHTTP at the HTTP level: paths, payload shapes, watch streaming, errors, lifecycle.

Requests are made with ``http.client`` so the wire format is checked as the apiserver defines
it, independently of the official client (which ``test_kubernetes_backend`` drives).
"""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from kdispatch.actors.model.errors import InvalidInputError
from kdispatch.testing.httpserver import ApiServerHTTP
from kdispatch.testing.memory import InMemoryApiServer, make_claim, make_node, make_pod

pytestmark = pytest.mark.timeout(30)

STRATEGIC = "application/strategic-merge-patch+json"
CLAIMS = "/apis/resource.k8s.io/v1"


@pytest.fixture
def srv(server: InMemoryApiServer) -> Iterator[ApiServerHTTP]:
    with ApiServerHTTP(server, hang_seconds=10.0) as http_server:
        yield http_server


def _conn(srv: ApiServerHTTP, timeout: float = 5.0) -> http.client.HTTPConnection:
    u = urlsplit(srv.url)
    assert u.hostname is not None and u.port is not None
    return http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)


def _call(
    conn: http.client.HTTPConnection,
    method: str,
    path: str,
    body: Any = None,
    *,
    content_type: str = "application/json",
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], Any]:
    data = (
        None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    )
    hdrs = {"Content-Type": content_type, **(headers or {})}
    conn.request(method, path, body=data, headers=hdrs)
    resp = conn.getresponse()
    raw = resp.read()
    return resp.status, dict(resp.getheaders()), json.loads(raw) if raw else None


# --------------------------------------------------------------------------- reads


def test_list_shapes(srv: ApiServerHTTP, server: InMemoryApiServer) -> None:
    server.create(make_pod("a", "ns1"))
    server.create(make_pod("b", "ns2"))
    server.create(make_node("n1", 1000, 1024))
    server.create(make_claim("c1", "ns1"))
    conn = _conn(srv)
    code, headers, pods = _call(conn, "GET", "/api/v1/pods")
    assert code == 200
    assert headers["Content-Type"] == "application/json"
    assert pods["kind"] == "PodList" and pods["apiVersion"] == "v1"
    assert pods["metadata"]["resourceVersion"] == server.resource_version
    assert [p["metadata"]["name"] for p in pods["items"]] == ["a", "b"]
    assert all("kind" not in p and "apiVersion" not in p for p in pods["items"])
    _, _, ns1 = _call(conn, "GET", "/api/v1/namespaces/ns1/pods")
    assert [p["metadata"]["name"] for p in ns1["items"]] == ["a"]
    _, _, nodes = _call(conn, "GET", "/api/v1/nodes")
    assert nodes["kind"] == "NodeList" and len(nodes["items"]) == 1
    _, _, claims = _call(conn, "GET", f"{CLAIMS}/resourceclaims")
    assert claims["kind"] == "ResourceClaimList"
    assert claims["apiVersion"] == "resource.k8s.io/v1"
    _, _, claims_ns = _call(conn, "GET", f"{CLAIMS}/namespaces/ns2/resourceclaims")
    assert claims_ns["items"] == []
    code, _, claim = _call(conn, "GET", f"{CLAIMS}/namespaces/ns1/resourceclaims/c1")
    assert code == 200 and claim["kind"] == "ResourceClaim"
    code, _, node = _call(conn, "GET", "/api/v1/nodes/n1")
    assert code == 200 and node["metadata"]["name"] == "n1"
    conn.close()


def test_keep_alive_reuses_one_connection_with_nodelay(
    srv: ApiServerHTTP, server: InMemoryApiServer
) -> None:
    server.create(make_pod("a"))
    conn = _conn(srv)
    for _ in range(5):
        code, headers, _ = _call(conn, "GET", "/api/v1/namespaces/default/pods/a")
        assert code == 200
        assert "Connection" not in headers
    assert srv.open_connections == 1
    socks = list(srv._conns.values())  # white-box: the accepted socket's options
    assert socks[0].getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    conn.close()
    assert srv.wait_connections(0, timeout=5.0)


def test_create_and_already_exists(srv: ApiServerHTTP, server: InMemoryApiServer) -> None:
    conn = _conn(srv)
    pod = {"metadata": {"name": "x"}, "spec": {"containers": []}}
    code, _, created = _call(conn, "POST", "/api/v1/namespaces/ns1/pods", pod)
    assert code == 201
    assert created["kind"] == "Pod" and created["metadata"]["namespace"] == "ns1"
    assert created["metadata"]["uid"]
    code, _, status = _call(conn, "POST", "/api/v1/namespaces/ns1/pods", pod)
    assert code == 409
    assert (status["kind"], status["reason"], status["code"]) == ("Status", "AlreadyExists", 409)
    code, _, _ = _call(conn, "POST", "/api/v1/nodes", {"metadata": {"name": "n1"}})
    assert code == 201
    code, _, _ = _call(
        conn, "POST", f"{CLAIMS}/namespaces/ns1/resourceclaims", make_claim("c1", "ns1")
    )
    assert code == 201
    assert server.get_object("ResourceClaim", "ns1", "c1") is not None
    conn.close()


# --------------------------------------------------------------------------- writes


def test_patch_status_preconditions_from_the_body(
    srv: ApiServerHTTP, server: InMemoryApiServer
) -> None:
    pod = server.create(make_pod("a"))
    uid, rv = pod["metadata"]["uid"], pod["metadata"]["resourceVersion"]
    conn = _conn(srv)
    path = "/api/v1/namespaces/default/pods/a/status"
    patch = {"metadata": {"uid": uid, "resourceVersion": rv}, "status": {"nominatedNodeName": "n1"}}
    code, _, out = _call(conn, "PATCH", path, patch, content_type=STRATEGIC)
    assert code == 200 and out["status"]["nominatedNodeName"] == "n1"
    code, _, status = _call(conn, "PATCH", path, patch, content_type=STRATEGIC)  # stale rv
    assert (code, status["reason"]) == (409, "Conflict")
    bad_uid = {"metadata": {"uid": "nope"}, "status": {}}
    code, _, status = _call(
        conn, "PATCH", path, bad_uid, content_type="application/merge-patch+json"
    )
    # a UID in the body is applied, not checked, and fails validation (as on kube-apiserver)
    assert (code, status["reason"]) == (422, "Invalid")
    assert status["details"]["causes"][0]["field"] == "metadata.uid"
    code, _, out = _call(
        conn, "PATCH", path, {"status": {"nominatedNodeName": None}}, content_type=STRATEGIC
    )
    assert code == 200 and "nominatedNodeName" not in out["status"]
    code, _, status = _call(conn, "PATCH", path, {}, content_type="application/apply-patch+yaml")
    assert (code, status["reason"]) == (415, "UnsupportedMediaType")
    code, _, status = _call(conn, "PATCH", path, b"{not json", content_type=STRATEGIC)
    assert (code, status["reason"]) == (400, "BadRequest")
    code, _, out = _call(conn, "PATCH", path, {"spec": {"nodeName": "x"}}, content_type=STRATEGIC)
    assert code == 200 and "nodeName" not in out["spec"]  # the status subresource ignores spec
    conn.close()


def test_binding_and_delete(srv: ApiServerHTTP, server: InMemoryApiServer) -> None:
    pod = server.create(make_pod("a"))
    uid = pod["metadata"]["uid"]
    conn = _conn(srv)
    path = "/api/v1/namespaces/default/pods/a"
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "a", "uid": uid},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"},
    }
    code, _, status = _call(conn, "POST", f"{path}/binding", {"metadata": {"name": "a"}})
    assert (code, status["reason"]) == (422, "Invalid")
    code, _, status = _call(conn, "POST", f"{path}/binding", binding)
    assert code == 201
    assert status == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "code": 201,
    }
    code, _, status = _call(conn, "POST", f"{path}/binding", binding)
    assert (code, status["reason"]) == (409, "Conflict")
    wrong = {"preconditions": {"uid": "other"}, "gracePeriodSeconds": 0}
    code, _, status = _call(conn, "DELETE", path, wrong)
    assert (code, status["reason"]) == (409, "Conflict")
    code, _, out = _call(
        conn, "DELETE", path, {"preconditions": {"uid": uid}, "gracePeriodSeconds": 0}
    )
    assert code == 200 and out["metadata"]["uid"] == uid
    code, _, status = _call(conn, "DELETE", path, {"preconditions": {"uid": uid}})
    assert code == 404
    assert status["reason"] == "NotFound"
    assert status["details"] == {"name": "a", "kind": "pods"}
    assert server.get_object("Pod", "default", "a") is None
    conn.close()


# --------------------------------------------------------------------------- errors


def test_error_statuses(srv: ApiServerHTTP, server: InMemoryApiServer) -> None:
    server.create(make_pod("a"))
    conn = _conn(srv)
    code, _, status = _call(conn, "GET", "/api/v1/widgets")  # not in the kind table
    assert (code, status["reason"]) == (404, "NotFound")
    code, _, status = _call(conn, "PUT", "/api/v1/namespaces/default/pods/a/status", {})
    assert (code, status["reason"]) == (405, "MethodNotAllowed")
    code, _, status = _call(conn, "GET", "/api/v1/pods?labelSelector=%28%28")
    assert code == 400
    server.script("get", "429")
    code, headers, status = _call(conn, "GET", "/api/v1/namespaces/default/pods/a")
    assert (code, status["reason"]) == (429, "TooManyRequests")
    assert headers["Retry-After"] == "0.05"
    assert status["details"]["retryAfterSeconds"] == 1
    server.script("get", "500")
    code, _, status = _call(conn, "GET", "/api/v1/namespaces/default/pods/a")
    assert (code, status["reason"]) == (500, "InternalError")
    server.script("get", "conn_reset")
    with pytest.raises((http.client.HTTPException, OSError)):
        _call(conn, "GET", "/api/v1/namespaces/default/pods/a")
    conn.close()


def test_the_request_log_records_each_request_with_its_writer_uid_and_outcome(
    srv: ApiServerHTTP, server: InMemoryApiServer
) -> None:
    """``request_log`` (a copy, oldest first): one record per request with its op, kind,
    namespace, name, UID precondition (``""`` for none), outcome (``"ok"``, the injected
    fault's name, or the server's reason), ``t`` (``time.monotonic()`` when answered) and
    ``writer`` (the HTTP ``User-Agent``); ``counts()`` counts the successful ones."""
    uid = server.create(make_pod("a"))["metadata"]["uid"]
    path = "/api/v1/namespaces/default/pods/a"

    def binding(precondition: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": "a", "uid": precondition},
            "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"},
        }

    server.script("bind", "429")
    agent = {"User-Agent": "scheduler-7"}
    before = time.monotonic()
    conn = _conn(srv)
    calls: list[tuple[str, str, Any]] = [
        ("GET", path, None),
        ("POST", f"{path}/binding", binding(uid)),  # the scripted 429
        ("POST", f"{path}/binding", binding("other-uid")),  # the UID precondition fails
        ("POST", f"{path}/binding", binding(uid)),
        ("GET", "/api/v1/namespaces/default/pods/b", None),
    ]
    codes = [_call(conn, method, p, body, headers=agent)[0] for method, p, body in calls]
    conn.close()
    after = time.monotonic()
    assert codes == [200, 429, 409, 201, 404]
    log = server.request_log
    assert [(r.op, r.name, r.uid, r.outcome) for r in log] == [
        ("get", "a", "", "ok"),
        ("bind", "a", uid, "429"),
        ("bind", "a", "other-uid", "Conflict"),
        ("bind", "a", uid, "ok"),
        ("get", "b", "", "NotFound"),
    ]
    assert {(r.kind, r.namespace, r.writer) for r in log} == {("Pod", "default", "scheduler-7")}
    times = [r.t for r in log]
    assert before <= times[0] and times == sorted(times) and times[-1] <= after
    assert (server.counts()["get"], server.counts()["bind"]) == (1, 1)
    log.clear()  # a copy: the server's log is untouched
    assert len(server.request_log) == 5


def test_token_required_when_configured(server: InMemoryApiServer) -> None:
    with ApiServerHTTP(server, token="t0k") as srv:
        conn = _conn(srv)
        code, _, status = _call(conn, "GET", "/api/v1/pods")
        assert (code, status["reason"]) == (401, "Unauthorized")
        code, _, _ = _call(conn, "GET", "/api/v1/pods", headers={"Authorization": "Bearer t0k"})
        assert code == 200
        conn.close()


def test_bad_arguments() -> None:
    with pytest.raises(InvalidInputError):
        ApiServerHTTP(object())  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        ApiServerHTTP(InMemoryApiServer(), hang_seconds=0)
    with pytest.raises(InvalidInputError):
        ApiServerHTTP(InMemoryApiServer(), timeout_reply="drop")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        _ = ApiServerHTTP(InMemoryApiServer()).url


# --------------------------------------------------------------------------- watch


def _watch(
    srv: ApiServerHTTP, path: str
) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    conn = _conn(srv)
    conn.request("GET", path)
    resp = conn.getresponse()
    assert resp.status == 200
    assert resp.getheader("Transfer-Encoding") == "chunked"
    return conn, resp


def _event(resp: http.client.HTTPResponse) -> dict[str, Any]:
    line = resp.readline()
    assert line.endswith(b"\n")
    event: dict[str, Any] = json.loads(line)
    return event


def test_watch_streams_events_from_a_resource_version(
    srv: ApiServerHTTP, server: InMemoryApiServer
) -> None:
    a = server.create(make_pod("a"))
    rv = a["metadata"]["resourceVersion"]
    server.create(make_pod("b", "other"))
    conn, resp = _watch(srv, f"/api/v1/namespaces/default/pods?watch=true&resourceVersion={rv}")
    server.create(make_pod("c"))
    server.remove("Pod", "default", "a")
    first, second = _event(resp), _event(resp)
    assert (first["type"], first["object"]["metadata"]["name"]) == ("ADDED", "c")
    assert first["object"]["kind"] == "Pod"
    assert (second["type"], second["object"]["metadata"]["name"]) == ("DELETED", "a")
    resp.close()
    conn.close()
    assert srv.wait_connections(0, timeout=5.0)  # the server notices the client left


def test_watch_without_resource_version_starts_with_the_current_state(
    srv: ApiServerHTTP, server: InMemoryApiServer
) -> None:
    server.create(make_node("n1", 1000, 1024))
    conn, resp = _watch(srv, "/api/v1/nodes?watch=1&allowWatchBookmarks=true")
    first = _event(resp)
    assert (first["type"], first["object"]["metadata"]["name"]) == ("ADDED", "n1")
    end = _event(resp)  # asked for bookmarks: the end of the initial events is marked
    assert end["type"] == "BOOKMARK"
    assert end["object"]["metadata"] == {
        "resourceVersion": first["object"]["metadata"]["resourceVersion"],
        "annotations": {"k8s.io/initial-events-end": "true"},
    }
    server.create(make_node("n2", 1000, 1024))
    second = _event(resp)
    assert (second["type"], second["object"]["metadata"]["name"]) == ("ADDED", "n2")
    conn.close()


def test_watch_timeout_ends_the_stream_cleanly(
    srv: ApiServerHTTP, server: InMemoryApiServer
) -> None:
    rv = server.resource_version
    conn, resp = _watch(
        srv, f"{CLAIMS}/resourceclaims?watch=true&resourceVersion={rv}&timeoutSeconds=1"
    )
    assert resp.read() == b""  # the terminating chunk arrives once timeoutSeconds passed
    conn.close()


def test_watch_too_old_resource_version_is_an_expired_error_event(
    srv: ApiServerHTTP, server: InMemoryApiServer
) -> None:
    old = server.create(make_pod("a"))["metadata"]["resourceVersion"]
    server.create(make_pod("b"))
    server.compact()
    conn, resp = _watch(srv, f"/api/v1/pods?watch=true&resourceVersion={old}")
    event = _event(resp)
    assert event["type"] == "ERROR"
    assert event["object"]["kind"] == "Status"
    assert (event["object"]["code"], event["object"]["reason"]) == (410, "Expired")
    assert resp.read() == b""
    conn.close()


def test_dropped_watch_cuts_the_connection(srv: ApiServerHTTP, server: InMemoryApiServer) -> None:
    rv = server.resource_version
    conn, resp = _watch(srv, f"/api/v1/pods?watch=true&resourceVersion={rv}")
    server.create(make_pod("a"))
    assert _event(resp)["type"] == "ADDED"
    assert server.drop_watches() == 1
    with pytest.raises((http.client.HTTPException, OSError)):
        resp.read()  # no terminating chunk: the stream is cut mid-way
    conn.close()


# --------------------------------------------------------------------------- lifecycle


def test_stop_ends_watches_hung_requests_and_idle_connections(server: InMemoryApiServer) -> None:
    server.create(make_pod("a"))
    srv = ApiServerHTTP(server, hang_seconds=60.0).start()
    idle = _conn(srv)
    assert _call(idle, "GET", "/api/v1/pods")[0] == 200
    watch_conn, resp = _watch(
        srv, f"/api/v1/pods?watch=true&resourceVersion={server.resource_version}"
    )
    hung = _conn(srv, timeout=30.0)
    server.script("get", "timeout")
    hung.request("GET", "/api/v1/namespaces/default/pods/a")
    assert srv.wait_connections(3, timeout=5.0)
    srv.stop()
    assert srv.open_connections == 0
    assert resp.read() == b""  # the watch ended with its terminating chunk
    with pytest.raises((http.client.HTTPException, OSError)):
        hung.getresponse()
    with pytest.raises(OSError):
        _call(_conn(srv), "GET", "/api/v1/pods")
    for c in (idle, watch_conn, hung):
        c.close()
    srv.stop()  # idempotent
