"""What the peer benchmark asks of the real apiserver: plain HTTPS as the admin (one keep-alive
connection per thread), fake nodes and pods, the ``apiserver_request_total`` counters, a pod
watch that records every binding, and the CPU time of a process.

Benchmark-only code. Every method runs on the caller's thread unless it says otherwise.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import socket
import ssl
import threading
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

Obj = dict[str, Any]
NOT_READY = "node.kubernetes.io/not-ready"
NAMESPACE = "peer"
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


def pod_body(name: str, scheduler: str, cpu: str, memory: str, group: str) -> Obj:
    """A pending pod for ``scheduler`` asking for ``cpu``/``memory``; ``group`` labels it
    ``fit`` or ``unfit``."""
    return {
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


def _each(fn: Any, items: Iterable[Obj], threads: int) -> None:
    with ThreadPoolExecutor(threads, thread_name_prefix="peer-create") as pool:
        for _ in pool.map(fn, items):
            pass


def list_pods(api: Api) -> list[Obj]:
    """Every pod of :data:`NAMESPACE`, as the server has it now."""
    items: list[Obj] = api.ok("GET", f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]
    return items


def condition(pod: Obj, kind: str) -> Obj | None:
    for cond in pod.get("status", {}).get("conditions") or []:
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


# --------------------------------------------------------------------------- watch


@dataclass
class Seen:
    """What the pod watch saw of one pod (monotonic seconds)."""

    bound_at: float | None = None
    node: str = ""
    rebinds: int = 0  # nodeName changed from one node to another: a pod bound twice
    unschedulable_at: float | None = None


@dataclass
class PodWatch:
    """Watches :data:`NAMESPACE`'s pods from ``resource_version`` on its own thread and
    records, per pod, when it was first seen bound or ``PodScheduled=False`` and whether its
    ``nodeName`` ever changed to another node. Reads under ``lock``."""

    api: Api
    resource_version: str
    pods: dict[str, Seen] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    changed: threading.Condition = field(init=False)
    error: str = ""
    _watches: int = 0
    _lists: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _conn: http.client.HTTPSConnection | None = None

    def __post_init__(self) -> None:
        self.changed = threading.Condition(self.lock)

    def start(self) -> PodWatch:
        self._thread = threading.Thread(target=self._run, name="peer-watch", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Main thread: close the stream and join the watch thread."""
        self._stop.set()
        sock = None if self._conn is None else self._conn.sock
        if sock is not None:  # unblocks the watch thread's read; close() would wait for it
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(10.0)
        if self._conn is not None:
            self._conn.close()

    def own_requests(self) -> dict[str, int]:
        """The requests this watch made that the server has counted: watches that ended
        (``WATCH pods``) and re-lists after ``410 Gone`` (``LIST pods``)."""
        with self.lock:
            return {"WATCH pods": self._watches, "LIST pods": self._lists}

    def _run(self) -> None:
        """Watch thread: watch from the last resourceVersion seen; when the server closes the
        stream (a busy apiserver closes watchers that read too slowly), watch again from
        there; after ``410 Gone``, list and go on from the list."""
        rv = self.resource_version
        try:
            while not self._stop.is_set():
                rv = self._watch_once(rv)
        except (OSError, http.client.HTTPException, ValueError, ApiError) as exc:
            if not self._stop.is_set():
                self.error = f"watch: {exc!r}"
        finally:
            with self.lock:
                self.changed.notify_all()

    def _watch_once(self, rv: str) -> str:
        """One watch request from ``rv``; returns the resourceVersion to go on from."""
        path = (
            f"/api/v1/namespaces/{NAMESPACE}/pods?watch=1&allowWatchBookmarks=true"
            f"&resourceVersion={rv}&timeoutSeconds=3600"
        )
        self._conn = conn = self.api.connection(timeout=None)
        try:
            conn.request("GET", path, headers=self.api.headers())
            resp = conn.getresponse()
            if resp.status == 410:
                resp.read()
                return self._relist()
            if resp.status != 200:
                raise ApiError(f"watch: {resp.status}")
            while not self._stop.is_set():
                line = resp.readline()
                if not line:
                    break
                event = json.loads(line)
                if event.get("type") == "ERROR":
                    if event.get("object", {}).get("code") == 410:
                        self._count_watch()
                        return self._relist()
                    raise ApiError(f"watch: {event.get('object')}")
                rv = event["object"]["metadata"]["resourceVersion"]
                if event.get("type") in ("ADDED", "MODIFIED"):
                    self._apply(event["object"])
            self._count_watch()
            return rv
        finally:
            conn.close()

    def _count_watch(self) -> None:
        with self.lock:
            self._watches += 1

    def _relist(self) -> str:
        reply = self.api.ok("GET", f"/api/v1/namespaces/{NAMESPACE}/pods")
        with self.lock:
            self._lists += 1
        for pod in reply["items"]:
            self._apply(pod)
        rv: str = reply["metadata"]["resourceVersion"]
        return rv

    def _apply(self, pod: Obj) -> None:
        now = time.monotonic()
        name = pod["metadata"]["name"]
        node = pod.get("spec", {}).get("nodeName") or ""
        sched = condition(pod, "PodScheduled")
        with self.lock:
            seen = self.pods.setdefault(name, Seen())
            if node and not seen.node:
                seen.node, seen.bound_at = node, now
            elif node and node != seen.node:
                seen.rebinds += 1
                seen.node = node
            unschedulable = sched is not None and sched.get("status") == "False"
            if unschedulable and seen.unschedulable_at is None:
                seen.unschedulable_at = now
            self.changed.notify_all()

    def wait(self, predicate: Any, timeout: float) -> bool:
        """Block until ``predicate(pods)`` holds (checked under the lock at every event) or
        ``timeout`` seconds pass; False on timeout or when the watch has ended."""
        deadline = time.monotonic() + timeout
        with self.lock:
            while not predicate(self.pods):
                left = deadline - time.monotonic()
                if left <= 0 or self.error:
                    return False
                self.changed.wait(min(left, 1.0))
            return True
