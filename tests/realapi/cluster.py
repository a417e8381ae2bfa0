"""The two apiservers the conformance suite runs against, behind one :class:`Target` interface.

* :class:`RealCluster`: :class:`kdispatch.testing.envtest.ControlPlane` (the real ``etcd`` and
  ``kube-apiserver`` built by ``python -m kdispatch.testing.envtest build``, on 127.0.0.1,
  secure, RBAC), with the flags and users this suite needs.
* :class:`EmulatorTarget`: the in-memory apiserver served by ``ApiServerHTTP``.

Both are driven only over HTTP through the official client (:class:`Admin` for test setup,
``KubernetesBackend`` / ``ClientListWatch`` for kdispatch itself), so a test cannot tell them
apart except through behaviour — which is the point.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from kdispatch.adapters.kubernetes import KubernetesBackend, prepare_configuration
from kdispatch.testing.envtest import Binaries, ControlPlane, write_kubeconfig
from kdispatch.testing.envtest.processes import Process
from kdispatch.testing.httpserver import ApiServerHTTP
from kdispatch.testing.memory import InMemoryApiServer
from kdispatch.testing.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]

__all__ = ["REPO", "Admin", "EmulatorTarget", "RealCluster", "Reply", "Target", "wait_for"]

FLOOD_USER = "kd-flood"
APISERVER_ARGS = (
    "--etcd-compaction-interval=0",  # the tests compact explicitly
    # ResourceClaim watches are served from etcd, not the watch cache, so an etcd compaction
    # shows as 410 Gone on them; pods keep the default watch cache
    "--watch-cache-sizes=resourceclaims.resource.k8s.io#0",
)
FEATURE_GATES = {"GenericWorkload": True}
"""PodGroups (``scheduling.k8s.io/v1beta1``) are beta in Kubernetes 1.37 and off by default:
their gate, and the group/version in :data:`RUNTIME_CONFIG`."""
RUNTIME_CONFIG = {"scheduling.k8s.io/v1beta1": True}


# --------------------------------------------------------------------------- targets


def _client_config(url: str, token: str | None, ca_cert: str | None) -> k8s.Configuration:
    cfg = k8s.Configuration(host=url)
    if token is not None:
        cfg.api_key = {"authorization": token}
        cfg.api_key_prefix = {"authorization": "Bearer"}
    if ca_cert is not None:
        cfg.ssl_ca_cert = ca_cert
    return prepare_configuration(cfg, 8)


class Target:
    """What a test needs from an apiserver under test. Subclasses set the attributes."""

    name: str
    url: str
    admin_token: str
    ca_cert: str | None = None

    def backend(
        self, *, token: str | None = None, workers: int = 8, request_timeout: float = 10.0
    ) -> KubernetesBackend:
        """A ``KubernetesBackend`` (the admin's unless ``token``). The caller closes it."""
        return KubernetesBackend.for_url(
            self.url,
            token=token or self.admin_token,
            ca_cert=self.ca_cert,
            workers=workers,
            request_timeout=request_timeout,
        )

    def api_client(self, token: str | None = None) -> k8s.ApiClient:
        """An official ``ApiClient`` (the admin's unless ``token``). The caller closes it."""
        return k8s.ApiClient(_client_config(self.url, token or self.admin_token, self.ca_cert))

    @contextmanager
    def admin(self) -> Iterator[Admin]:
        """Raw requests as the cluster admin, through a client closed on exit."""
        client = self.api_client()
        try:
            yield Admin(client)
        finally:
            client.close()  # type: ignore[no-untyped-call]

    def write_kubeconfig(self, path: Path, token: str | None = None) -> Path:
        ca = Path(self.ca_cert).read_bytes() if self.ca_cert is not None else None
        return write_kubeconfig(path, self.url, token or self.admin_token, ca_pem=ca)

    @property
    def real(self) -> bool:
        return self.name == "real"

    def compact(self, revision: int | None = None) -> None:
        """Forget the event history (up to ``revision`` where supported), so watches from an
        older resourceVersion get 410."""
        raise NotImplementedError


class EmulatorTarget(Target):
    """``ApiServerHTTP`` over a fresh :class:`InMemoryApiServer`."""

    name = "emulator"

    def __init__(self) -> None:
        self.admin_token = "emulator-admin-" + secrets.token_hex(8)
        self.mem = InMemoryApiServer(strict_claims=True)
        self.http = ApiServerHTTP(self.mem, token=self.admin_token, hang_seconds=5.0)
        self.http.start()
        self.url = self.http.url

    def compact(self, revision: int | None = None) -> None:
        self.mem.compact()  # always up to the current resourceVersion

    def close(self) -> None:
        self.http.stop()


class RealCluster(Target):
    """The envtest control plane, with a second static-token user (``kd-flood`` in group
    ``kd-testers``), etcd compaction left to the tests, and PodGroups served
    (:data:`FEATURE_GATES`, :data:`RUNTIME_CONFIG`). :meth:`start` blocks until a pod
    can be created."""

    name = "real"

    def __init__(self, workdir: Path, binaries: Binaries | None = None) -> None:
        self.plane = ControlPlane(
            binaries,
            workdir=workdir,
            users={FLOOD_USER: ["kd-testers"]},
            apiserver_args=APISERVER_ARGS,
            feature_gates=FEATURE_GATES,
            runtime_config=RUNTIME_CONFIG,
        )
        self.flood_token = self.plane.token(FLOOD_USER)
        self.admin_token = self.plane.admin_token

    def start(self, timeout: float = 120.0) -> RealCluster:
        self.plane.start(timeout)
        self.url = self.plane.url
        self.ca_cert = str(self.plane.ca_file)
        return self

    def stop(self) -> None:
        """Stop the apiserver, then etcd. Idempotent."""
        self.plane.stop()

    @property
    def processes(self) -> list[Process]:
        return self.plane.processes

    def create_namespace(self, name: str) -> None:
        """The namespace with its ``default`` ServiceAccount."""
        self.plane.create_namespace(name)

    def compact(self, revision: int | None = None) -> None:
        """Compact etcd to ``revision`` (default: the current one)."""
        assert self.plane.etcd is not None
        self.plane.etcd.compact(revision)


# --------------------------------------------------------------------------- admin requests


@dataclass
class Reply:
    """An HTTP reply: status code, decoded JSON body (``{}`` when none) and headers."""

    status: int
    body: dict[str, Any]
    headers: Mapping[str, str]

    @property
    def reason(self) -> str | None:
        reason = self.body.get("reason")
        return reason if isinstance(reason, str) else None


class Admin:
    """Raw REST requests through the official client's ``call_api`` (auth, TLS, serialisation
    as kdispatch's own requests), answering :class:`Reply` for any status instead of raising."""

    def __init__(self, client: k8s.ApiClient) -> None:
        self.client = client

    def request(
        self,
        method: str,
        path: str,
        body: object = None,
        *,
        content_type: str = "application/json",
        query: Mapping[str, str] | None = None,
        timeout: float = 30.0,
    ) -> Reply:
        client: Any = self.client
        method_, url, headers, data, _ = client.param_serialize(
            method,
            path,
            query_params=list((query or {}).items()),
            header_params={"Content-Type": content_type, "Accept": "application/json"},
            body=body,
            auth_settings=["BearerToken"],
        )
        try:
            resp = client.call_api(
                method_, url, header_params=headers, body=data, _request_timeout=timeout
            )
            raw, status, reply_headers = resp.read(), resp.status, resp.headers
        except ApiException as exc:
            raw, status, reply_headers = exc.body, exc.status, exc.headers or {}
        try:
            parsed = json.loads(raw) if raw else {}
        except (ValueError, UnicodeDecodeError):
            parsed = {"_raw": raw.decode(errors="replace") if isinstance(raw, bytes) else raw}
        return Reply(
            int(status), parsed if isinstance(parsed, dict) else {"_json": parsed}, reply_headers
        )

    def ok(self, method: str, path: str, body: object = None, **kw: Any) -> dict[str, Any]:
        """``request``, asserting a 2xx reply; returns the body."""
        reply = self.request(method, path, body, **kw)
        assert 200 <= reply.status < 300, f"{method} {path}: {reply.status} {reply.body}"
        return reply.body

    # ----------------------------------------------------------------- shortcuts

    def create(self, path: str, obj: Mapping[str, Any]) -> dict[str, Any]:
        return self.ok("POST", path, dict(obj))

    def pod_path(self, namespace: str, name: str = "") -> str:
        base = f"/api/v1/namespaces/{namespace}/pods"
        return f"{base}/{name}" if name else base

    def podgroup_path(self, namespace: str, name: str = "", sub: str = "") -> str:
        base = f"/apis/scheduling.k8s.io/v1beta1/namespaces/{namespace}/podgroups"
        return "/".join(p for p in (base, name, sub) if p)

    def claim_path(self, namespace: str, name: str = "") -> str:
        base = f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims"
        return f"{base}/{name}" if name else base

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        return self.ok("GET", self.pod_path(namespace, name))

    def get_claim(self, namespace: str, name: str) -> dict[str, Any]:
        return self.ok("GET", self.claim_path(namespace, name))

    def pod_exists(self, namespace: str, name: str) -> bool:
        reply = self.request("GET", self.pod_path(namespace, name))
        assert reply.status in (200, 404), reply
        return reply.status == 200


def iter_conditions(obj: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(c, dict):
            yield c


def condition(obj: Mapping[str, Any], ctype: str) -> dict[str, Any] | None:
    """The condition of ``ctype`` in ``obj.status.conditions``, or None."""
    return next((c for c in iter_conditions(obj) if c.get("type") == ctype), None)
