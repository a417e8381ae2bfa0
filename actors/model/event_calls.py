"""Events (``events.k8s.io/v1``): the :class:`EventRecord` call, the best-effort write of one
Event or its series, which the recorder builds (docs/events.md). Each Event has its own actor (a
UID derived from its name), so occurrences of one series merge while they wait. Pure module;
``send`` runs on an executor worker.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar, Final, Protocol, Self, cast, runtime_checkable

from .backend import ApiBackend, missing_methods
from .calls import BEST_EFFORT, Call
from .errors import AlreadyExistsError, InvalidInputError, InvalidRequestError, NotFoundError
from .objects import Obj, ObjectRef, as_object, is_dns_label, is_dns_subdomain

__all__ = ["EVENT", "EventRecord", "EventSink", "micro_time"]

EVENT: Final = "Event"
EVENT_TYPES: Final = frozenset({"Normal", "Warning"})
NOTE_LIMIT: Final = 1024
"""The apiserver refuses a longer ``note`` (bytes)."""
FIELD_LIMIT: Final = 128
"""The apiserver refuses a longer ``reason``, ``action`` or reporting instance."""


@runtime_checkable
class EventSink(Protocol):
    """A backend that can create and patch objects of any kind (``KubernetesBackend`` and the
    in-memory apiserver can). Thread-safe; runs on executor workers."""

    def create(self, kind: str, namespace: str, obj: Mapping[str, Any]) -> Obj:
        """Create ``obj``; ``AlreadyExistsError`` when the name is taken."""
        ...

    def patch(
        self,
        kind: str,
        namespace: str,
        name: str,
        patch: Mapping[str, Any],
        *,
        patch_type: Any = None,
    ) -> Obj:
        """Patch the object; ``NotFoundError`` when it is gone."""
        ...


def micro_time(epoch: float) -> str:
    """``metav1.MicroTime`` text of ``epoch`` seconds: RFC 3339, microseconds, UTC."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _event_uid(namespace: str, name: str) -> str:
    """The actor key of an Event (its server UID is unknown until it is created)."""
    digest = hashlib.blake2b(f"{namespace}/{name}".encode(), digest_size=16).hexdigest()
    return f"event-{digest}"


@dataclass(frozen=True, slots=True)
class EventRecord(Call):
    """Create an Event, or patch its ``series`` (best-effort). Built by
    :class:`EventRecorder`; :meth:`new` builds one by hand.

    ``body`` is the Event without ``series``; ``count`` the occurrences so far (a ``series`` is
    sent from 2 on), ``last_observed`` the newest (MicroTime text); ``create``: the Event may
    not exist yet. A patch answered 404 creates the Event; a create answered 409 patches the
    series (or is done, for one occurrence). An Event is read only by name (its server UID is
    never known): after another 409, as any call is, and to see whether an unanswered request
    landed.
    """

    call_type = "event_record"
    kind = EVENT
    relevance = BEST_EFFORT
    best_effort: ClassVar[bool] = True
    reads_object: ClassVar[bool] = False
    keyed_by_name: ClassVar[bool] = True  # the actor's UID is a digest of the name

    ref: ObjectRef
    body: Mapping[str, Any] = field(compare=False, repr=False)
    count: int = 1
    last_observed: str = ""
    create: bool = True
    basis: Obj | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.ref.kind != EVENT:
            raise InvalidInputError(f"an EventRecord applies to an Event, not a {self.ref.kind}")
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise InvalidInputError(f"count must be an int >= 1, got {self.count!r}")

    @classmethod
    def new(cls, body: Mapping[str, Any], *, count: int = 1, create: bool = True) -> Self:
        """A record of the Event ``body`` (``metadata.name`` and ``metadata.namespace`` set,
        no ``series``); ``last_observed`` is its ``eventTime``. Raises ``InvalidInputError``."""
        data = as_object(body)
        meta = data.get("metadata")
        if not isinstance(meta, Mapping):
            raise InvalidInputError("an Event needs metadata")
        namespace, name = meta.get("namespace"), meta.get("name")
        if not is_dns_label(namespace) or not is_dns_subdomain(name):
            raise InvalidInputError(f"invalid Event name {namespace!r}/{name!r}")
        assert isinstance(namespace, str) and isinstance(name, str)
        ref = ObjectRef(EVENT, namespace, name, _event_uid(namespace, name))
        when = data.get("eventTime")
        return cls(ref, data, count, when if isinstance(when, str) else "", create)

    def observed(self, count: int, when: str) -> Self:
        """The same Event with ``count`` occurrences, the last at ``when`` (a series patch)."""
        return type(self)(self.ref, self.body, count, when, False)

    def merge(self, older: Self) -> Self:
        """The higher count and newer time win; a pending create stays a create."""
        count = max(self.count, older.count)
        when = max(self.last_observed, older.last_observed)
        create = self.create or older.create
        if (count, when, create) == (self.count, self.last_observed, self.create):
            return self
        return type(self)(self.ref, self.body, count, when, create)

    def is_noop(self, obj: Obj | None) -> bool:
        """Never: an Event is recorded, not compared."""
        del obj
        return False

    def apply(self, obj: Obj) -> Obj:
        """Events are not tracked: ``obj`` unchanged."""
        return obj

    def landed(self, fresh: Obj) -> bool:
        """The Event exists (its server UID is not known here: any object of its name), with
        at least this record's occurrences when it counts more than one."""
        if self.count < 2:
            return True
        series = fresh.get("series")
        count = series.get("count") if isinstance(series, Mapping) else None
        return isinstance(count, int) and count >= self.count

    def _series(self) -> dict[str, Any]:
        return {"count": self.count, "lastObservedTime": self.last_observed}

    def _full(self) -> dict[str, Any]:
        out = dict(self.body)
        if self.count >= 2:
            out["series"] = self._series()
        return out

    def send(self, backend: ApiBackend, obj: Obj | None) -> Obj | None:
        """Create the Event, or patch its series (see the class). Executor worker thread."""
        del obj
        if missing_methods(backend, EventSink):
            raise InvalidRequestError(
                f"{type(backend).__name__} cannot record Events (no create/patch methods)"
            )
        sink = cast(EventSink, backend)
        ref = self.ref
        if self.create or self.count < 2:
            try:
                return sink.create(EVENT, ref.namespace, self._full())
            except AlreadyExistsError:
                if self.count < 2:
                    return None  # recorded already (a retry whose reply was lost)
        try:
            return sink.patch(
                EVENT, ref.namespace, ref.name, {"series": self._series()}, patch_type="strategic"
            )
        except NotFoundError:  # expired, or its create was dropped: start it again
            return sink.create(EVENT, ref.namespace, self._full())

    def describe(self) -> str:
        """Short human description for logs."""
        return f"{self.call_type} {self.ref.namespace}/{self.ref.name} x{self.count}"
