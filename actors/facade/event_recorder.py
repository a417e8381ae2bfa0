"""The :class:`EventRecorder`: Events correlated into series and spam-filtered per object, as
client-go's recorder does, then handed to a dispatcher as :class:`~.event_calls.EventRecord`
calls (docs/events.md). Thread-safe (one lock); :meth:`EventRecorder.event` never blocks.
"""

from __future__ import annotations

import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Final, Protocol

from kdispatch.actors.model.calls import Call
from kdispatch.actors.model.config import check_positive
from kdispatch.actors.model.errors import InvalidInputError
from kdispatch.actors.model.event_calls import (
    EVENT,
    EVENT_TYPES,
    FIELD_LIMIT,
    NOTE_LIMIT,
    EventRecord,
    micro_time,
)
from kdispatch.actors.model.objects import as_object, qualified_name_problem
from kdispatch.actors.runtime.ratelimit import TokenBucket

__all__ = ["CallSubmitter", "EventRecorder"]


class CallSubmitter(Protocol):
    """What an :class:`EventRecorder` sends its Events through: anything whose ``submit(call)``
    returns a future, such as a :class:`~kdispatch.Dispatcher`, a
    :class:`~kdispatch.ProcessDispatcher` or a layer of your own over one."""

    def submit(self, call: Call) -> Future[Any]: ...


@dataclass(slots=True)
class _Series:
    record: EventRecord
    last: float


def _reference(obj: object) -> dict[str, str]:
    """An ``ObjectReference`` to ``obj`` (kind, apiVersion, namespace, name, uid)."""
    data = as_object(obj)
    meta = data.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    ref = {
        "kind": data.get("kind") or "Pod",
        "apiVersion": data.get("apiVersion") or "v1",
        "namespace": meta.get("namespace") or "",
        "name": meta.get("name") or "",
        "uid": meta.get("uid") or "",
    }
    if not ref["name"]:
        raise InvalidInputError("the regarding object has no metadata.name")
    rv = meta.get("resourceVersion")
    if isinstance(rv, str):
        ref["resourceVersion"] = rv
    return {k: str(v) for k, v in ref.items() if v}


def _truncate(text: str, limit: int) -> str:
    try:
        raw = text.encode()
    except UnicodeEncodeError as exc:
        raise InvalidInputError(
            f"text cannot be encoded as UTF-8: {exc.reason} at position {exc.start}"
        ) from None
    if len(raw) <= limit:
        return text
    return raw[:limit].decode(errors="ignore")


class EventRecorder:
    """Records Events through a dispatcher (a :class:`CallSubmitter`), correlated into series
    and spam-filtered per object as client-go's recorder does.

    ``controller``: ``reportingController`` (e.g. the scheduler's name); ``instance``:
    ``reportingInstance`` (default ``<controller>-<hostname>``). ``window``: how long after an
    occurrence the next one joins its series. ``spam_burst``/``spam_qps``: the per-object
    token bucket. ``cache_size``: series and spam buckets kept (least recently used dropped).
    ``clock`` (monotonic) drives windows and buckets, ``wall`` (epoch) the Event times and names.
    Thread-safe; :meth:`event` never blocks.

    Raises :class:`~kdispatch.InvalidInputError` for a bad setting, when built: ``controller``
    not a qualified name (``my-scheduler``, ``example.com/my-scheduler``: kube-apiserver refuses
    every Event of any other), ``instance`` not a non-empty str (longer than 128 bytes, it is
    cut), a number that is not > 0 or is NaN (:class:`~kdispatch.InvalidConfigError`).
    """

    def __init__(
        self,
        dispatcher: CallSubmitter,
        *,
        controller: str,
        instance: str | None = None,
        window: float = 360.0,
        spam_burst: int = 25,
        spam_qps: float = 1.0 / 300.0,
        cache_size: int = 4096,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        if not callable(getattr(dispatcher, "submit", None)):
            raise InvalidInputError(f"{dispatcher!r} has no submit method")
        if not isinstance(controller, str) or not controller:
            raise InvalidInputError(f"controller must be a non-empty str, got {controller!r}")
        if (problem := qualified_name_problem(controller)) is not None:
            raise InvalidInputError(
                f"controller {controller!r} is not a qualified name, which kube-apiserver "
                f"requires of reportingController: {problem}"
            )
        if instance is None:
            instance = f"{controller}-{socket.gethostname()}"
        elif not isinstance(instance, str) or not instance:
            raise InvalidInputError(f"instance must be a non-empty str or None, got {instance!r}")
        check_positive("window", window)
        check_positive("spam_qps", spam_qps)
        check_positive("spam_burst", spam_burst, integer=True)
        check_positive("cache_size", cache_size, integer=True)
        for name, value in (("clock", clock), ("wall", wall)):
            if not callable(value):
                raise InvalidInputError(f"{name} must be callable, got {value!r}")
        self._dispatcher = dispatcher
        self.controller = controller
        self.instance = _truncate(instance, FIELD_LIMIT)
        self._window = float(window)
        self._spam = (spam_qps, spam_burst)
        self._cache_size = cache_size
        self._clock = clock
        self._wall = wall
        self._lock = threading.Lock()
        self._series: OrderedDict[tuple[Any, ...], _Series] = OrderedDict()
        self._buckets: OrderedDict[tuple[str, ...], TokenBucket] = OrderedDict()
        self._last_nanos = 0
        self.recorded = 0
        """Occurrences handed to the dispatcher."""
        self.spam_dropped = 0
        """Occurrences dropped by the per-object spam filter."""

    def event(
        self,
        regarding: object,
        *,
        type: str = "Normal",
        reason: str,
        action: str,
        note: str,
        related: object | None = None,
    ) -> Future[Any] | None:
        """Any thread. Record one occurrence; returns the call's future, or None when the spam
        filter dropped it. Raises ``InvalidInputError`` for a bad type, a reason or action
        that is not 1-128 bytes of UTF-8 (kube-apiserver's limit), or a note that is not a str.
        The Event's name is the regarding object's, cut to leave room for a unique suffix."""
        if type not in EVENT_TYPES:
            raise InvalidInputError(f"type must be Normal or Warning, got {type!r}")
        for name, value in (("reason", reason), ("action", action)):
            if not isinstance(value, str) or not value or len(value.encode()) > FIELD_LIMIT:
                raise InvalidInputError(
                    f"{name} must be a str of 1-{FIELD_LIMIT} bytes (UTF-8), got {value!r}"
                )
        if not isinstance(note, str):
            raise InvalidInputError(f"note must be a str, got {note!r}")
        about = _reference(regarding)
        rel = _reference(related) if related is not None else None
        note = _truncate(note, NOTE_LIMIT)
        identity = tuple(about.get(k, "") for k in ("kind", "apiVersion", "namespace", "name"))
        related_key = tuple(sorted(rel.items())) if rel else ()
        key = (type, reason, action, note, identity, about.get("uid", ""), related_key)
        with self._lock:
            now = self._clock()
            if not self._allow((*identity, about.get("uid", ""))):
                self.spam_dropped += 1
                return None
            series = self._series.get(key)
            if series is not None and now - series.last <= self._window:
                record = series.record.observed(series.record.count + 1, micro_time(self._wall()))
                series.record, series.last = record, now
                self._series.move_to_end(key)
            else:
                fields = {"action": action, "reason": reason, "type": type, "note": note}
                record = self._new(about, rel, fields)
                self._series[key] = _Series(record, now)
                self._series.move_to_end(key)
                while len(self._series) > self._cache_size:
                    self._series.popitem(last=False)
            self.recorded += 1
        return self._dispatcher.submit(record)

    def _allow(self, obj_key: tuple[str, ...]) -> bool:
        """The spam filter: one token per occurrence from the object's bucket. Lock held."""
        bucket = self._buckets.get(obj_key)
        if bucket is None:
            qps, burst = self._spam
            bucket = self._buckets[obj_key] = TokenBucket(qps, burst, self._clock)
            while len(self._buckets) > self._cache_size:
                self._buckets.popitem(last=False)
        self._buckets.move_to_end(obj_key)
        return bucket.try_take() == 0

    def _new(
        self, about: dict[str, str], related: dict[str, str] | None, fields: dict[str, str]
    ) -> EventRecord:
        """A new Event for a first occurrence (``fields``: its action, reason, type and
        note). Lock held."""
        epoch = self._wall()
        nanos = max(int(epoch * 1e9), self._last_nanos + 1)  # unique names in a burst
        self._last_nanos = nanos
        namespace = about.get("namespace") or "default"
        body: dict[str, Any] = {
            "apiVersion": "events.k8s.io/v1",
            "kind": EVENT,
            "metadata": {
                "name": f"{_name_prefix(about['name'])}.{nanos:x}",
                "namespace": namespace,
            },
            "eventTime": micro_time(epoch),
            "reportingController": self.controller,
            "reportingInstance": self.instance,
            **fields,
            "regarding": about,
        }
        if related is not None:
            body["related"] = related
        return EventRecord.new(body)


_NAME_ROOM: Final = 253 - 1 - 16
"""What an Event's name keeps of the regarding object's name: room for ``.`` and 16 hex digits
within the 253 characters of an object name."""


def _name_prefix(name: str) -> str:
    """The start of an Event's name: the regarding object's name, cut to fit (then without a
    trailing ``.`` or ``-``, which no name part may end with)."""
    return name if len(name) <= _NAME_ROOM else name[:_NAME_ROOM].rstrip(".-")
