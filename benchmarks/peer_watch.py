"""The peer benchmark's watch on the server: the pods of its namespace (when each was first
seen bound or ``PodScheduled=False``, whether one was bound twice) and, for a workload with
gangs, its PodGroups (when each first showed ``PodGroupInitiallyScheduled``, with which
status, and whether it went from True back to False).

Benchmark-only code. One watch thread per resource; everything else runs on the caller's
thread and reads under :attr:`PodWatch.lock`.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from benchmarks.peer_cluster import (
    INITIALLY_SCHEDULED,
    NAMESPACE,
    PODGROUPS,
    Api,
    ApiError,
    Obj,
    condition,
)


@dataclass
class Seen:
    """What the pod watch saw of one pod (monotonic seconds)."""

    bound_at: float | None = None
    node: str = ""
    rebinds: int = 0  # nodeName changed from one node to another: a pod bound twice
    unschedulable_at: float | None = None


@dataclass
class GroupSeen:
    """What the PodGroup watch saw of one PodGroup's ``PodGroupInitiallyScheduled``
    (monotonic seconds): when it first appeared, its status then and now, and whether it was
    True and later False."""

    condition_at: float | None = None
    first_status: str = ""
    status: str = ""
    regressed: bool = False


@dataclass
class _Stream:
    """One watched resource: its list path, its request key (as ``apiserver_request_total``
    names it), what to do with each object, and the requests it made that ended."""

    key: str
    path: str
    apply: Callable[[Obj], None]
    resource_version: str
    watches: int = 0
    lists: int = 0
    conn: http.client.HTTPSConnection | None = None
    thread: threading.Thread | None = None


@dataclass
class PodWatch:
    """Watches :data:`NAMESPACE`'s pods from ``resource_version`` and, with
    ``groups_version``, its PodGroups from that one, each on its own thread; records per pod
    (:class:`Seen`) and per PodGroup (:class:`GroupSeen`). Reads under ``lock``; ``changed``
    is notified at every event."""

    api: Api
    resource_version: str
    groups_version: str | None = None
    pods: dict[str, Seen] = field(default_factory=dict)
    groups: dict[str, GroupSeen] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    changed: threading.Condition = field(init=False)
    error: str = ""
    _streams: list[_Stream] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.changed = threading.Condition(self.lock)
        pods = f"/api/v1/namespaces/{NAMESPACE}/pods"
        self._streams.append(_Stream("pods", pods, self._apply, self.resource_version))
        if self.groups_version is not None:
            self._streams.append(
                _Stream(
                    "scheduling.k8s.io/podgroups",
                    PODGROUPS,
                    self._apply_group,
                    self.groups_version,
                )
            )

    def start(self) -> PodWatch:
        for stream in self._streams:
            name = f"peer-watch-{stream.key.rsplit('/', 1)[-1]}"
            stream.thread = threading.Thread(
                target=self._run, args=(stream,), name=name, daemon=True
            )
            stream.thread.start()
        return self

    def stop(self) -> None:
        """Caller's thread: close the streams and join the watch threads."""
        self._stop.set()
        for stream in self._streams:
            sock = None if stream.conn is None else stream.conn.sock
            if sock is not None:  # unblocks the watch thread's read; close() would wait for it
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
        for stream in self._streams:
            if stream.thread is not None:
                stream.thread.join(10.0)
            if stream.conn is not None:
                stream.conn.close()

    def own_requests(self) -> dict[str, int]:
        """The requests this watch made that the server has counted: watches that ended
        (``WATCH pods``) and re-lists after ``410 Gone`` (``LIST pods``), and the same for
        PodGroups when they are watched."""
        with self.lock:
            out = {}
            for stream in self._streams:
                out[f"WATCH {stream.key}"] = stream.watches
                out[f"LIST {stream.key}"] = stream.lists
            return out

    def _run(self, stream: _Stream) -> None:
        """Watch thread: watch from the last resourceVersion seen; when the server closes the
        stream (a busy apiserver closes watchers that read too slowly), watch again from
        there; after ``410 Gone``, list and go on from the list."""
        rv = stream.resource_version
        try:
            while not self._stop.is_set():
                rv = self._watch_once(stream, rv)
        except (OSError, http.client.HTTPException, ValueError, ApiError) as exc:
            if not self._stop.is_set():
                self.error = f"watch {stream.key}: {exc!r}"
        finally:
            with self.lock:
                self.changed.notify_all()

    def _watch_once(self, stream: _Stream, rv: str) -> str:
        """One watch request from ``rv``; returns the resourceVersion to go on from."""
        path = (
            f"{stream.path}?watch=1&allowWatchBookmarks=true"
            f"&resourceVersion={rv}&timeoutSeconds=3600"
        )
        stream.conn = conn = self.api.connection(timeout=None)
        try:
            conn.request("GET", path, headers=self.api.headers())
            resp = conn.getresponse()
            if resp.status == 410:
                resp.read()
                return self._relist(stream)
            if resp.status != 200:
                raise ApiError(f"watch: {resp.status}")
            while not self._stop.is_set():
                line = resp.readline()
                if not line:
                    break
                event = json.loads(line)
                if event.get("type") == "ERROR":
                    if event.get("object", {}).get("code") == 410:
                        self._count(stream, watches=1)
                        return self._relist(stream)
                    raise ApiError(f"watch: {event.get('object')}")
                rv = event["object"]["metadata"]["resourceVersion"]
                if event.get("type") in ("ADDED", "MODIFIED"):
                    stream.apply(event["object"])
            self._count(stream, watches=1)
            return rv
        finally:
            conn.close()

    def _count(self, stream: _Stream, watches: int = 0, lists: int = 0) -> None:
        with self.lock:
            stream.watches += watches
            stream.lists += lists

    def _relist(self, stream: _Stream) -> str:
        reply = self.api.ok("GET", stream.path)
        self._count(stream, lists=1)
        for obj in reply["items"]:
            stream.apply(obj)
        rv: str = reply["metadata"]["resourceVersion"]
        return rv

    def _apply(self, pod: Obj) -> None:
        """Pod watch thread: record a pod's binding and ``PodScheduled=False``."""
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

    def _apply_group(self, group: Obj) -> None:
        """PodGroup watch thread: record its ``PodGroupInitiallyScheduled`` condition."""
        now = time.monotonic()
        cond = condition(group, INITIALLY_SCHEDULED)
        status = "" if cond is None else str(cond.get("status", ""))
        with self.lock:
            seen = self.groups.setdefault(group["metadata"]["name"], GroupSeen())
            if status and seen.condition_at is None:
                seen.condition_at, seen.first_status = now, status
            if seen.status == "True" and status == "False":
                seen.regressed = True
            if status:
                seen.status = status
            self.changed.notify_all()

    def snapshot(self) -> tuple[dict[str, Seen], dict[str, GroupSeen]]:
        """What was seen so far: per pod and per PodGroup (copies of the maps)."""
        with self.lock:
            return dict(self.pods), dict(self.groups)

    def wait(self, predicate: Callable[[dict[str, Seen]], Any], timeout: float) -> bool:
        """Block until ``predicate(pods)`` holds (checked under the lock at every event) or
        ``timeout`` seconds pass; False on timeout or when a watch has ended."""
        deadline = time.monotonic() + timeout
        with self.lock:
            while not predicate(self.pods):
                left = deadline - time.monotonic()
                if left <= 0 or self.error:
                    return False
                self.changed.wait(min(left, 1.0))
            return True
