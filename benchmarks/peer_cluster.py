"""What the peer benchmark asks of the real apiserver: plain HTTPS as the admin (one keep-alive
connection per thread), fake nodes, pods and PodGroups, the ``apiserver_request_total``
counters and the CPU time of a process (the watch is :mod:`benchmarks.peer_watch`).

Benchmark-only code. Every method runs on the caller's thread unless it says otherwise.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import ssl
import threading
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

Obj = dict[str, Any]
NOT_READY = "node.kubernetes.io/not-ready"
NAMESPACE = "peer"
PODGROUPS = f"/apis/scheduling.k8s.io/v1beta1/namespaces/{NAMESPACE}/podgroups"
INITIALLY_SCHEDULED = "PodGroupInitiallyScheduled"
MERGE = "application/merge-patch+json"


class ApiError(RuntimeError):
    """A request the benchmark needed answered with 2xx got something else."""


class Api:
    """Requests as one bearer token over HTTPS; a keep-alive connection per calling thread."""

    def __init__(self, url: str, token: str, ca_file: Path) -> None:
        parts = urlsplit(url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 443
        self._token = token
        self._tls = ssl.create_default_context(cafile=str(ca_file))
        self._local = threading.local()

    def connection(self, timeout: float | None = 30.0) -> http.client.HTTPSConnection:
        """A new connection (the caller closes it): for a long-running watch."""
        return http.client.HTTPSConnection(self.host, self.port, context=self._tls, timeout=timeout)

    def headers(self, content_type: str = "application/json") -> dict[str, str]:
        return {
            "Authorization": f"Bearer {self._token}",
            "Content-Type": content_type,
            "Accept": "application/json",
        }

    def raw(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        content_type: str = "application/json",
    ) -> tuple[int, bytes]:
        """``method path``: the status and the body's bytes (one reconnect on a broken pipe)."""
        data = None if body is None else json.dumps(body).encode()
        for attempt in (0, 1):
            conn: http.client.HTTPSConnection | None = getattr(self._local, "conn", None)
            if conn is None:
                conn = self._local.conn = self.connection()
            try:
                conn.request(method, path, body=data, headers=self.headers(content_type))
                resp = conn.getresponse()
                return resp.status, resp.read()
            except (OSError, http.client.HTTPException):
                conn.close()
                self._local.conn = None
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def ok(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        content_type: str = "application/json",
    ) -> Obj:
        """``method path`` that must succeed: its JSON body, or :class:`ApiError`."""
        status, raw = self.raw(method, path, body, content_type)
        if not 200 <= status < 300:
            raise ApiError(f"{method} {path}: {status} {raw[:300]!r}")
        parsed = json.loads(raw) if raw else {}
        return parsed if isinstance(parsed, dict) else {}


# --------------------------------------------------------------------------- objects


def node_body(name: str, cpu: str, memory: str, pods: int) -> Obj:
    """A fake node: Ready, with allocatable cpu/memory/pods, no kubelet behind it."""
    resources = {"cpu": cpu, "memory": memory, "pods": str(pods)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {},
        "status": {
            "capacity": dict(resources),
            "allocatable": dict(resources),
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        },
    }


def pod_body(
    name: str, scheduler: str, cpu: str, memory: str, group: str, *, pod_group: str = ""
) -> Obj:
    """A pending pod for ``scheduler`` asking for ``cpu``/``memory``; ``group`` labels it
    (``fit``, ``unfit``, ``gang`` or ``gang-infeasible``); with ``pod_group`` a member of that
    PodGroup (``spec.schedulingGroup.podGroupName``)."""
    body: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"peer-group": group}},
        "spec": {
            "schedulerName": scheduler,
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "c",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": cpu, "memory": memory}},
                }
            ],
        },
    }
    if pod_group:
        body["spec"]["schedulingGroup"] = {"podGroupName": pod_group}
    return body


def podgroup_body(name: str, min_count: int) -> Obj:
    """A ``scheduling.k8s.io/v1beta1`` PodGroup: a gang of at least ``min_count`` pods."""
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
    }


def create_nodes(api: Api, bodies: list[Obj], threads: int = 8) -> None:
    """Create the nodes and remove the ``not-ready`` taint the TaintNodesByCondition admission
    plugin adds (the node lifecycle controller's job once a kubelet reports Ready; there is
    neither here)."""

    def one(body: Obj) -> None:
        node = api.ok("POST", "/api/v1/nodes", body)
        taints = [t for t in node["spec"].get("taints") or [] if t["key"] != NOT_READY]
        api.ok(
            "PATCH",
            f"/api/v1/nodes/{body['metadata']['name']}",
            {"spec": {"taints": taints or None}},
            MERGE,
        )

    _each(one, bodies, threads)


def create_pods(api: Api, bodies: list[Obj], threads: int = 8) -> None:
    """Create the pods in :data:`NAMESPACE`, ``threads`` at a time."""
    path = f"/api/v1/namespaces/{NAMESPACE}/pods"
    _each(lambda body: api.ok("POST", path, body), bodies, threads)


def create_podgroups(api: Api, bodies: list[Obj], threads: int = 8) -> None:
    """Create the PodGroups in :data:`NAMESPACE`, ``threads`` at a time."""
    _each(lambda body: api.ok("POST", PODGROUPS, body), bodies, threads)


def _each(fn: Any, items: Iterable[Obj], threads: int) -> None:
    with ThreadPoolExecutor(threads, thread_name_prefix="peer-create") as pool:
        for _ in pool.map(fn, items):
            pass


def list_pods(api: Api) -> list[Obj]:
    """Every pod of :data:`NAMESPACE`, as the server has it now."""
    items: list[Obj] = api.ok("GET", f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]
    return items


def list_podgroups(api: Api) -> list[Obj]:
    """Every PodGroup of :data:`NAMESPACE`, as the server has it now."""
    items: list[Obj] = api.ok("GET", PODGROUPS)["items"]
    return items


def condition(obj: Obj, kind: str) -> Obj | None:
    """The status condition of type ``kind`` of a pod or PodGroup, or None."""
    for cond in obj.get("status", {}).get("conditions") or []:
        if cond.get("type") == kind:
            found: Obj = cond
            return found
    return None


def timestamp(value: str) -> float:
    """An RFC 3339 timestamp of the apiserver (second resolution) as epoch seconds."""
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


# --------------------------------------------------------------------------- metrics

_SAMPLE = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
RequestKey = tuple[str, str, str, str]  # verb, resource, subresource, code


def request_totals(api: Api) -> dict[RequestKey, float]:
    """``apiserver_request_total`` summed over everything but verb, resource (``group/``
    prefixed for named groups), subresource and code. Resource-less requests (``/metrics``,
    ``/readyz``, discovery) are left out."""
    status, raw = api.raw("GET", "/metrics")
    if status != 200:
        raise ApiError(f"GET /metrics: {status}")
    out: dict[RequestKey, float] = {}
    for line in raw.decode().splitlines():
        m = _SAMPLE.match(line)
        if m is None:
            continue
        labels = dict(_LABEL.findall(m["labels"]))
        resource = labels.get("resource", "")
        if not resource:
            continue
        group = labels.get("group", "")
        key = (
            labels.get("verb", ""),
            f"{group}/{resource}" if group else resource,
            labels.get("subresource", ""),
            labels.get("code", ""),
        )
        out[key] = out.get(key, 0.0) + float(m["value"])
    return out


def request_delta(
    before: Mapping[RequestKey, float], after: Mapping[RequestKey, float]
) -> dict[RequestKey, int]:
    """What was counted between the two snapshots (non-zero entries only)."""
    out = {k: round(v - before.get(k, 0.0)) for k, v in after.items()}
    return {k: v for k, v in out.items() if v}


# --------------------------------------------------------------------------- CPU

_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (``/proc/<pid>/stat``); 0 when
    it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _TICK
