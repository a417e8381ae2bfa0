"""The object store of the in-memory apiserver: objects, resourceVersions, events and watches.

Objects are JSON dicts stored by ``(kind, namespace, name)`` (namespace ``""`` for
cluster-scoped kinds such as Node). One global resourceVersion counter, as in etcd; every
change bumps it and emits exactly one event, kept in a bounded history (for watches that
resume from a resourceVersion and for the later pages of a list) and delivered to the
matching watches (:mod:`kdispatch.testing.memory_watch`). Stored objects are never mutated:
every write stores a new snapshot, and what the store hands out are those snapshots, for the
server to copy.

:class:`ObjectStore` shares the server's lock: the methods documented "Lock held" run with it
held by their caller, the others (the list and watch requests, compaction, the watches'
unregistering) take it themselves.
"""

from __future__ import annotations

import base64
import json
import threading
import uuid
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from loguru import logger

from kdispatch.actors.model.errors import (
    AlreadyExistsError,
    GoneError,
    InvalidObjectError,
    InvalidRequestError,
    NotFoundError,
)
from kdispatch.actors.model.kinds import KindTable
from kdispatch.actors.model.objects import check_uid, is_dns_label, is_dns_subdomain
from kdispatch.adapters.listing import ObjectList

from .memory_deletion import check_finalizers, finalized, held, mark_deleting
from .memory_objects import clone, to_json
from .memory_rules import check_str, generated_name, now, plural, qualified
from .memory_select import selector_predicate
from .memory_watch import EventType, Watch

Key = tuple[str, str, str]
Json = dict[str, Any]


class _Event(NamedTuple):
    rv: int
    kind: str
    namespace: str
    type: EventType
    obj: Json
    old: Json | None  # the state before a MODIFIED or DELETED (selectors, list snapshots)


def key_of(data: Json) -> Key:
    """The key a stored (or to be stored) object is kept under."""
    meta = data["metadata"]
    return (data["kind"], meta.get("namespace", ""), meta["name"])


class ObjectStore:
    """The objects, the resourceVersion, the event history and the watch registry of one
    in-memory apiserver. ``lock``: the server's lock. ``kinds``: the kind table (which kinds
    are cluster-scoped, their ``apiVersion`` and group); ``cluster_scoped``: more kinds
    stored without a namespace. ``history``: how many events are kept (0: none).
    ``watch_queue_limit``: how many live events a watch's consumer may fall behind before the
    watch is dropped (None: unbounded)."""

    def __init__(
        self,
        lock: threading.Lock,
        kinds: KindTable,
        cluster_scoped: Iterable[str],
        history: int,
        watch_queue_limit: int | None,
    ) -> None:
        self._lock = lock
        self.kinds = kinds
        self._extra_cluster_scoped = frozenset(cluster_scoped)
        self._watch_queue_limit = watch_queue_limit
        self.objects: dict[Key, Json] = {}
        """The stored snapshots by key (never to be mutated or handed out). Lock held."""
        self.rv = 0
        """The current global resourceVersion. Lock held."""
        self._history: deque[_Event] = deque()
        self._history_limit = history
        self._floor = 0  # every event with rv > floor is in the history
        self._watches: dict[str, set[Watch]] = {}

    # ================================================================ keys and lookup

    def scoped(self, kind: str) -> bool:
        """Whether ``kind`` is cluster-scoped (stored under namespace ``""``)."""
        if kind in self._extra_cluster_scoped:
            return True
        info = self.kinds.get(kind)
        return info is not None and not info.namespaced

    def patch_flavour(self, kind: str) -> str:
        """The patch flavour ``kind`` takes (its kind table row; ``merge`` for unknown kinds)."""
        info = self.kinds.get(kind)
        return info.patch if info is not None else "merge"

    def key(self, kind: str, namespace: str, name: str) -> Key:
        """The key of ``kind`` ``namespace/name`` (``InvalidRequestError`` for non-strings)."""
        check_str("kind", kind)
        check_str("namespace", namespace)
        check_str("name", name)
        return (kind, "" if self.scoped(kind) else namespace, name)

    def lookup(self, kind: str, namespace: str, name: str) -> Json:
        """The stored snapshot (never to be mutated or handed out). Lock held."""
        obj = self.objects.get(self.key(kind, namespace, name))
        if obj is None:
            raise NotFoundError(f'{plural(kind)} "{name}" not found')
        return obj

    def in_namespace(self, kind: str, namespace: str) -> list[Json]:
        """Stored objects of ``kind`` in ``namespace`` (snapshots). Lock held."""
        return [o for (k, ns, _), o in self.objects.items() if k == kind and ns == namespace]

    def admin_object(self, obj: Mapping[str, Any]) -> Json:
        """Validated owned copy of an object given to create/update, namespace normalised."""
        if not isinstance(obj, Mapping):
            raise InvalidObjectError(f"object must be a mapping, got {type(obj).__name__}")
        data: Json = to_json(obj)
        kind = data.get("kind")
        if not isinstance(kind, str) or not kind:
            raise InvalidObjectError("object has no kind")
        meta = data.get("metadata")
        if not isinstance(meta, dict):
            raise InvalidObjectError("object has no metadata")
        if not meta.get("name"):
            raise InvalidObjectError(
                f'{qualified(self.kinds, kind)} "" is invalid: metadata.name: Required value: '
                "name or generateName is required"
            )
        if not is_dns_subdomain(meta.get("name")):
            raise InvalidObjectError(f"invalid name {meta.get('name')!r}")
        if self.scoped(kind):
            meta.pop("namespace", None)
        else:
            meta.setdefault("namespace", "default")
            if not is_dns_label(meta["namespace"]):
                raise InvalidObjectError(f"invalid namespace {meta['namespace']!r}")
        if "uid" in meta:
            check_uid(meta["uid"])
        return data

    def new_object(self, obj: Mapping[str, Any]) -> Json:
        """:meth:`admin_object` of a new object, named from its ``generateName`` if it has no
        name, with ``uid`` (uuid4), ``creationTimestamp`` and (known kinds) ``apiVersion``
        filled when missing."""
        data = self.admin_object(generated_name(obj))
        meta = data["metadata"]
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", now())
        info = self.kinds.get(data["kind"])
        if "apiVersion" not in data and info is not None:
            data["apiVersion"] = info.api_version
        return data

    # ================================================================ writes (lock held)

    def insert(self, data: Json) -> Json:
        """Store a new object (ADDED). Lock held."""
        key = key_of(data)
        if key in self.objects:
            raise AlreadyExistsError(f'{plural(key[0])} "{key[2]}" already exists')
        self.rv += 1
        data["metadata"]["resourceVersion"] = str(self.rv)
        self.objects[key] = data
        self._emit("ADDED", data)
        return data

    def replace(self, cur: Json, new: Json) -> Json:
        """Store ``new`` (sharing structure with ``cur``) with a fresh rv; MODIFIED. Lock held."""
        self.rv += 1
        new = {**new, "metadata": {**new["metadata"], "resourceVersion": str(self.rv)}}
        self.objects[key_of(cur)] = new
        self._emit("MODIFIED", new, cur)
        return new

    def write(self, cur: Json, new: Json) -> Json:
        """Store a patched or replaced ``new``: refused when it adds a finalizer to an object
        being deleted; removes the object when it drops the last finalizer its deletion waited
        for (the reply is ``new`` at ``cur``'s resourceVersion). Lock held."""
        check_finalizers(cur, new, qualified(self.kinds, cur["kind"]))
        if finalized(cur, new):
            self.remove(cur)
            return new
        return self.replace(cur, new)

    def delete(self, cur: Json, grace_period_seconds: int | None) -> Json:
        """Remove ``cur``, or mark it deleted while finalizers hold it; returns its state after
        the deletion. Lock held."""
        if not held(cur):
            return self.remove(cur)
        marked = mark_deleting(cur, grace_period_seconds)
        return cur if marked is None else self.replace(cur, marked)

    def remove(self, cur: Json) -> Json:
        """Delete ``cur``; DELETED with the last state at a fresh rv. Lock held."""
        del self.objects[key_of(cur)]
        self.rv += 1
        last = {**cur, "metadata": {**cur["metadata"], "resourceVersion": str(self.rv)}}
        self._emit("DELETED", last, cur)
        return last

    def _emit(self, event_type: EventType, obj: Json, old: Json | None = None) -> None:
        """Record an event at the current rv and deliver it to the matching watches. Lock
        held."""
        kind = obj["kind"]
        namespace = obj["metadata"].get("namespace", "")
        if self._history_limit == 0:
            self._floor = self.rv
        else:
            if len(self._history) >= self._history_limit:
                self._floor = self._history.popleft().rv
            self._history.append(_Event(self.rv, kind, namespace, event_type, obj, old))
        watches = self._watches.get(kind)
        if not watches:
            return
        overflowed = [
            w for w in watches if w.matches(namespace) and not w.push(event_type, obj, old)
        ]
        for w in overflowed:
            watches.discard(w)
            logger.debug("dropped a {} watch that fell behind", kind)

    # ================================================================ list, watch, history

    def listing(
        self,
        kind: str,
        namespace: str | None,
        *,
        label_selector: str | None,
        field_selector: str | None,
        limit: int | None,
        continue_token: str | None,
    ) -> ObjectList:
        """A list request (see ``InMemoryApiServer.list``); ``limit`` already checked. Takes
        the lock. Any thread."""
        page = _decode_continue(continue_token)
        matches = selector_predicate(label_selector, field_selector)
        scoped = self.scoped(kind)
        after: tuple[str, str] | None = None
        with self._lock:
            if page is None:
                at, stored = self.rv, self.objects.items()
            else:
                at, after = page
                stored = self._objects_at(kind, at).items()
            snapshots = [
                obj
                for (k, ns, _), obj in stored
                if k == kind and (namespace is None or scoped or ns == namespace)
            ]
        rv = str(at)
        snapshots.sort(key=_sort_key)
        if after is not None:
            snapshots = [o for o in snapshots if _sort_key(o) > after]
        if matches is not None:
            snapshots = [o for o in snapshots if matches(o)]
        token = None
        if limit is not None and len(snapshots) > limit:
            snapshots = snapshots[:limit]
            token = _encode_continue(at, _sort_key(snapshots[-1]))
        return ObjectList([clone(o) for o in snapshots], rv, token)

    def _objects_at(self, kind: str, rv: int) -> dict[Key, Json]:
        """The objects of ``kind`` as they were at resourceVersion ``rv``, by key: the stored
        ones with every later event undone, newest first. ``GoneError`` (410 Expired, as etcd
        answers a compacted continue token) when the history no longer reaches back to ``rv``.
        Lock held."""
        if rv > self.rv:
            raise InvalidRequestError("invalid continue token", status=400)
        if rv < self._floor:
            raise GoneError(
                "The provided continue parameter is too old to display a consistent list "
                "result. You can start a new list without the continue parameter."
            )
        objects = {key: obj for key, obj in self.objects.items() if key[0] == kind}
        for event in reversed(self._history):
            if event.rv <= rv:
                break
            if event.kind != kind:
                continue
            key = key_of(event.obj)
            if event.type == "ADDED":
                del objects[key]
            else:
                assert event.old is not None, "MODIFIED and DELETED keep the state before"
                objects[key] = event.old
        return objects

    def open_watch(
        self,
        kind: str,
        resource_version: str | None,
        namespace: str | None,
        *,
        label_selector: str | None,
        field_selector: str | None,
    ) -> Watch:
        """A watch request (see ``InMemoryApiServer.watch``); ``resource_version`` already
        checked. Takes the lock. Any thread."""
        scope = None if self.scoped(kind) else namespace
        w = Watch(
            kind,
            scope,
            self._unregister,
            self._watch_queue_limit,
            selector_predicate(label_selector, field_selector),
        )
        with self._lock:
            if resource_version == "0":
                for (k, ns, _), obj in sorted(self.objects.items()):
                    if k == kind and w.matches(ns):
                        w.push("ADDED", obj, initial=True)
            elif resource_version:
                since = int(resource_version)
                if since < self._floor:
                    raise GoneError(f"too old resource version: {since} ({self._floor})")
                replay: list[_Event] = []
                for event in reversed(self._history):
                    if event.rv <= since:
                        break
                    if event.kind == kind and w.matches(event.namespace):
                        replay.append(event)
                for event in reversed(replay):
                    w.push(event.type, event.obj, event.old, initial=True)
            self._watches.setdefault(kind, set()).add(w)
        return w

    def _unregister(self, w: Watch) -> None:
        """Forget a stopped watch. Consumer thread; never called with the watch lock held."""
        with self._lock:
            watches = self._watches.get(w.kind)
            if watches is not None:
                watches.discard(w)

    def drop_watches(self) -> int:
        """End every open watch as a dropped connection would; returns how many. Takes the
        lock. Any thread."""
        with self._lock:
            watches = [w for ws in self._watches.values() for w in ws]
            self._watches.clear()
            dropped = sum(1 for w in watches if w.end(dropped=True))
        logger.debug("dropped {} watches", dropped)
        return dropped

    def compact(self) -> None:
        """Forget the event history. Takes the lock. Any thread."""
        with self._lock:
            self._history.clear()
            self._floor = self.rv


def _sort_key(obj: Json) -> tuple[str, str]:
    meta = obj["metadata"]
    return (meta.get("namespace", ""), meta["name"])


def _encode_continue(rv: int, key: tuple[str, str]) -> str:
    """The next page's token, as etcd's: the list's resourceVersion and the last key served."""
    body = {"v": "meta.k8s.io/v1", "rv": rv, "start": list(key)}
    raw = json.dumps(body, separators=(",", ":")).encode("utf-8")
    return base64.urlsafe_b64encode(raw).decode("ascii")


def _decode_continue(token: object) -> tuple[int, tuple[str, str]] | None:
    """The resourceVersion and the last key of a token from :func:`_encode_continue`; None
    for no token, 400 ``invalid continue token`` for anything else."""
    if token is None or token == "":
        return None
    if not isinstance(token, str):
        raise InvalidRequestError(f"continue must be a string, got {token!r}")
    try:
        body = json.loads(base64.urlsafe_b64decode(token.encode("ascii")))
    except (ValueError, UnicodeError):
        raise InvalidRequestError("invalid continue token", status=400) from None
    rv = body.get("rv") if isinstance(body, dict) else None
    key = body.get("start") if isinstance(body, dict) else None
    if (
        isinstance(rv, bool)
        or not isinstance(rv, int)
        or rv < 1
        or not (isinstance(key, list) and len(key) == 2 and all(isinstance(k, str) for k in key))
    ):
        raise InvalidRequestError("invalid continue token", status=400)
    return rv, (key[0], key[1])
