"""The I/O-free core of an informer: cache, ordering, re-list diffing, delivery, sync, retries.

The threaded :class:`~kdispatch.adapters.informer.Informer` and the asyncio
:class:`~kdispatch.adapters.aio_informer.AioInformer` are shells around one
:class:`InformerCore`: the shell does the I/O (a list, a watch stream, the waits) and feeds what
it read in. The core keeps the cache keyed by ``metadata.uid``; drops an update whose
resourceVersion is not newer than the cached one (the resume point never moves back); turns a
re-list into deletes (with the last known state) first, then adds and updates; calls every
handler in order (one that raises is logged and skipped); keeps the sync state and the
failures ``wait_for_sync`` reports; and says how long to back off after failures.

Driven by one thread (the informer's, or the event loop's); other threads only read it (a
single lookup in ``cache``, or :meth:`InformerCore.snapshot` under the lock it is given) or
:meth:`~InformerCore.halt` it. No threads, sockets, clocks or asyncio.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, Final, NamedTuple

from loguru import logger

from kdispatch.actors.model.backoff import backoff_delay
from kdispatch.actors.model.config import check_positive
from kdispatch.actors.model.errors import (
    ApiConnectionError,
    ApiError,
    BadResponseError,
    ForbiddenError,
    InformerSyncTimeout,
    InvalidInputError,
    KdispatchError,
    ServerError,
    UnauthorizedError,
    without_tracebacks,
)
from kdispatch.actors.model.objects import get_path, is_newer, resource_version, rv_is_newer

from .transport import decode_object, error_from_status

Obj = dict[str, Any]
OnAdd = Callable[[Obj], None]
OnUpdate = Callable[[Obj, Obj], None]
OnDelete = Callable[[Obj], None]
OnError = Callable[[BaseException], None]

ADDED, MODIFIED, DELETED, BOOKMARK = "ADDED", "MODIFIED", "DELETED", "BOOKMARK"
EVENT_TYPES = frozenset({ADDED, MODIFIED, DELETED, BOOKMARK})
_JITTER = 0.2  # retry delays are stretched by up to 20 %, as the executor's

PERMANENT_ERRORS = (UnauthorizedError, ForbiddenError)
"""Failures that ``wait_for_sync`` raises as they come instead of waiting out its timeout (a
refreshed token or a new RBAC binding may still fix them: the informer keeps retrying)."""


class Handler(NamedTuple):
    """One registered set of callbacks; any may be None."""

    on_add: OnAdd | None
    on_update: OnUpdate | None
    on_delete: OnDelete | None


def check_handlers(*handlers: object) -> None:
    """:class:`InvalidInputError` unless each of ``handlers`` is callable or None (both
    informers' ``add_handler``). Pure."""
    for fn in handlers:
        if fn is not None and not callable(fn):
            raise InvalidInputError(f"handlers must be callable, got {fn!r}")


def check_dispatcher(dispatcher: object) -> None:
    """:class:`InvalidInputError` unless ``dispatcher`` has callable ``on_add``, ``on_update``
    and ``on_delete`` (both informers' ``attach``). Pure."""
    for method in ("on_add", "on_update", "on_delete"):
        if not callable(getattr(dispatcher, method, None)):
            raise InvalidInputError(f"dispatcher has no {method}(obj)")


def uid_of(obj: Mapping[str, Any]) -> str | None:
    """``metadata.uid`` or None. Pure."""
    uid = get_path(obj, "metadata", "uid")
    return uid if isinstance(uid, str) and uid else None


def decode_event(line: bytes, what: str) -> tuple[str, Obj]:
    """One line of a watch stream: the event's type (ADDED, MODIFIED, DELETED or BOOKMARK) and
    object. An ``ERROR`` event raises its :class:`ApiError`; a malformed line
    :class:`BadResponseError`. Pure."""
    event = decode_object(line, what, "event")
    event_type, obj = event.get("type"), event.get("object")
    if not isinstance(obj, dict):
        raise BadResponseError(f"{what}: event has no object")
    if event_type == "ERROR":
        code = obj.get("code")
        raise error_from_status(code if isinstance(code, int) else 500, obj, what)
    if event_type not in EVENT_TYPES:
        raise BadResponseError(f"{what}: unknown event type {event_type!r}")
    return event_type, obj


LONGEST_SETTING: Final = 1e9
"""Seconds (about 31 years): the most an informer's backoff, resync or timeout may be. A
longer one is no setting anyone means, and overflows the socket and lock waits it becomes."""


def check_settings(
    on_error: object, backoff_initial: float, backoff_max: float, **more: float
) -> tuple[float, float]:
    """Check the settings both informers share: ``on_error`` callable or None, the backoff and
    the ``more`` numbers positive and at most :data:`LONGEST_SETTING` (NaN and infinity
    refused), ``backoff_max >= backoff_initial``; the backoff as a pair of floats. Raises
    :class:`InvalidInputError`."""
    if on_error is not None and not callable(on_error):
        raise InvalidInputError(f"on_error must be callable, got {on_error!r}")
    numbers = {"backoff_initial": backoff_initial, "backoff_max": backoff_max, **more}
    for label, value in numbers.items():
        check_positive(label, value)
        if value > LONGEST_SETTING:
            raise InvalidInputError(
                f"{label} must be at most {LONGEST_SETTING:.0e} seconds, got {value!r}"
            )
    if backoff_max < backoff_initial:
        raise InvalidInputError("backoff_max must be >= backoff_initial")
    return float(backoff_initial), float(backoff_max)


def describe_failure(error: BaseException, server: str | None) -> str:
    """A failure as a person reads it: a connection error names the server it could not reach
    (``cannot connect to http://...: <error>``). Pure."""
    if isinstance(error, ApiConnectionError | ConnectionError) and server:
        return f"cannot connect to {server}: {error}"
    return f"{type(error).__name__}: {error}" if isinstance(error, KdispatchError) else repr(error)


class WatchLoop:
    """What an informer's list/watch loop does next, as client-go's reflector does: list when
    :attr:`need_list`, else resume the watch; after an input that returns False, wait
    ``InformerCore.retry_delay(failures)`` first. Both informers drive one; pure (no I/O, no
    clock)."""

    __slots__ = ("failures", "gone_streak", "need_list")

    def __init__(self) -> None:
        self.need_list = True
        self.failures = 0  # failures in a row: the backoff's exponent
        self.gone_streak = 0  # 410s in a row with no event in between

    def listed(self) -> None:
        """A list succeeded: watch from its resourceVersion, at once."""
        self.need_list, self.failures = False, 0

    def watched(self, progress: bool, full_course: bool) -> bool:
        """A watch ended without an error: renew it at once (True) when it delivered something
        or ran its course; back off first (False) when it ended early with nothing."""
        if progress or full_course:
            self.failures = self.gone_streak = 0
            return True
        self.failures += 1
        return False

    def gone(self, progress: bool) -> bool:
        """410 Gone: list again, at once (True) unless 410s keep coming with no event in
        between (False: back off)."""
        self.need_list = True
        self.gone_streak = 1 if progress else self.gone_streak + 1
        if self.gone_streak <= 1:
            return True
        self.failures = self.gone_streak - 1
        return False

    def failed(self, error: BaseException, progress: bool) -> bool:
        """A list or watch failed: back off (False; a watch that delivered events first starts
        the backoff afresh). After a server's internal error, list again rather than resume
        from a resourceVersion it may never serve (a 500 "PrevKv=nil" below a compaction
        repeats forever); dropped connections and 429s resume the watch."""
        self.failures = 1 if progress else self.failures + 1
        if isinstance(error, ServerError):
            self.need_list = True
        return False


class InformerCore:
    """The state of one informer; see the module docstring. Driven by one thread."""

    def __init__(
        self,
        *,
        name: str,
        kind: str,
        lock: contextlib.AbstractContextManager[Any] | None = None,
        typed: Callable[[Obj], Obj] | None = None,
        backoff: tuple[float, float] = (0.05, 5.0),
        on_error: OnError | None = None,
    ) -> None:
        """``lock`` guards cache writes against :meth:`snapshot` from other threads (none
        needed on an event loop); ``typed`` fills ``kind``/``apiVersion`` into objects as they
        come in (list items lack them); ``backoff``: the first and the longest
        :meth:`retry_delay`; ``on_error``: the hook :meth:`tell_error` calls."""
        self.name = name
        self.kind = kind
        self._backoff = backoff
        self._on_error = on_error
        self._rng = random.Random()
        self._lock: contextlib.AbstractContextManager[Any] = lock or contextlib.nullcontext()
        self._typed = typed
        self._items: dict[str, Obj] = {}
        self._handlers: list[Handler] = []
        # cache, resource_version, synced, last_error, relists: as the InformerShell members
        # of the same names say (has_synced for synced); the shell only reads them
        self.cache: Mapping[str, Obj] = MappingProxyType(self._items)
        self.resource_version: str | None = None
        self.synced = False
        self.last_error: BaseException | None = None
        self.relists = 0
        self.errors = 0
        """Failures reported so far (``wait_for_sync`` tells new ones from old ones)."""
        self._halted = False
        self.log = logger.bind(informer=name, kind=kind)  # the shell logs here too

    def add_handler(self, handler: Handler) -> None:
        """Register callbacks (the shell checks them, and that it is not running yet)."""
        self._handlers.append(handler)

    def halt(self) -> None:
        """The shell stopped: from now on no handler is called (not even for the rest of a
        list being delivered). Any thread."""
        self._halted = True

    def snapshot(self) -> dict[str, Obj]:
        """A consistent copy of the cache (under the lock). Any thread."""
        with self._lock:
            return dict(self._items)

    def listed(self, items: Iterable[Obj], resource_version: str) -> None:
        """A complete list arrived: make the cache equal to it and tell the handlers (deletes
        first, then adds and updates), resume from ``resource_version``, mark synced and
        clear the last error."""
        fresh: dict[str, Obj] = {}
        for obj in items:
            uid = uid_of(obj) if isinstance(obj, Mapping) else None
            if uid is None:
                self.log.warning("listed object without a uid ignored")
                continue
            fresh[uid] = self._type(obj)
        items_now = self._items
        for uid, obj in [(u, o) for u, o in items_now.items() if u not in fresh]:
            with self._lock:
                del items_now[uid]
            self._fire("on_delete", obj)
        for uid, obj in fresh.items():
            self._upsert(uid, obj)
        self.resource_version = resource_version
        self.relists += 1
        self.synced = True
        self.last_error = None

    def event(self, event_type: str, obj: Obj) -> bool:
        """One watch event. Returns False when it was dropped (no object, no uid, or not newer
        than the cached state), True otherwise. Raises :class:`BadResponseError` for an
        unknown event type."""
        if event_type not in EVENT_TYPES:
            raise BadResponseError(f"watch {self.kind}: unknown event type {event_type!r}")
        if not isinstance(obj, Mapping):
            self.log.warning("{} event without an object ignored", event_type)
            return False
        rv = resource_version(obj)
        if event_type == BOOKMARK:
            self._advance(rv)
            return True
        uid = uid_of(obj)
        if uid is None:
            self.log.warning("{} event without a uid ignored", event_type)
            return False
        obj = self._type(obj)
        if event_type == DELETED:
            changed = uid in self._items
            if changed:
                with self._lock:
                    del self._items[uid]
                self._fire("on_delete", obj)
        else:
            changed = self._upsert(uid, obj)
        self._advance(rv)
        return changed

    def replay(self) -> None:
        """Resync: every cached object to ``on_update(obj, obj)``."""
        for obj in list(self._items.values()):
            self._fire("on_update", obj, obj)

    def failed(self, error: BaseException) -> None:
        """A list or watch failed. An ``ApiError`` is kept without its traceback, whose
        frames would hold it in a reference cycle (docs/behaviour.md); another error (a bug)
        keeps it."""
        self.last_error = without_tracebacks(error) if isinstance(error, ApiError) else error
        self.errors += 1

    def progressed(self) -> None:
        """A watch delivered something or ran its course: the connection works again."""
        self.last_error = None

    def retry_delay(self, failures: int) -> float:
        """Seconds to wait after ``failures`` failures in a row: the backoff doubling from its
        first to its longest delay, with 20 % jitter (the executor's formula)."""
        initial, cap = self._backoff
        return backoff_delay(
            failures, initial=initial, cap=cap, jitter=_JITTER, rand=self._rng.random()
        )

    def tell_error(self, error: BaseException) -> None:
        """Call the ``on_error`` hook, if any (one that raises is logged)."""
        if self._on_error is not None:
            try:
                self._on_error(error)
            except Exception:
                self.log.exception("informer on_error hook raised")

    def sync_failure(self, errors_before: int) -> BaseException | None:
        """What ``wait_for_sync`` should raise now instead of waiting on: a permanent failure
        (401/403) reported after it began waiting (``errors_before`` = :attr:`errors` then),
        while nothing is synced; else None."""
        if self.synced or self.errors <= errors_before:
            return None
        error = self.last_error
        return error if isinstance(error, PERMANENT_ERRORS) else None

    def sync_timeout(self, timeout: float | None, server: str | None = None) -> InformerSyncTimeout:
        """The error ``wait_for_sync(timeout)`` raises when its time ran out, naming the cause
        (``server``: where the informer connects, for a connection failure)."""
        error = self.last_error
        cause = (
            describe_failure(error, server)
            if error is not None
            else "no list answered yet" + (f" by {server}" if server else "")
        )
        exc = InformerSyncTimeout(
            f"informer {self.name} ({self.kind}) did not sync within {timeout:g} s: {cause}",
            last_error=error,
            cause=cause,
        )
        if error is not None:
            exc.__cause__ = error
        return exc

    def _type(self, obj: Obj) -> Obj:
        return self._typed(obj) if self._typed is not None else obj

    def _upsert(self, uid: str, obj: Obj) -> bool:
        cur = self._items.get(uid)
        if cur is None:
            with self._lock:
                self._items[uid] = obj
            self._fire("on_add", obj)
            return True
        if is_newer(obj, cur, strict=True):
            with self._lock:
                self._items[uid] = obj
            self._fire("on_update", cur, obj)
            return True
        return False

    def _advance(self, rv: str | None) -> None:
        """Move the resume point forward to ``rv`` (never backwards on a stale event)."""
        if rv is not None and rv_is_newer(rv, self.resource_version, strict=True):
            self.resource_version = rv

    def _fire(self, callback: str, *args: Obj) -> None:
        """Call every handler's ``callback`` (``"on_add"``, ...); one that raises is logged.
        Nothing once halted."""
        if self._halted:
            return
        for handler in self._handlers:
            fn = getattr(handler, callback)
            if fn is None:
                continue
            try:
                fn(*args)
            except Exception:
                self.log.exception("informer handler {!r} raised for {}", fn, uid_of(args[-1]))


class InformerShell:
    """What both informer shells read straight from their :class:`InformerCore` (an
    :class:`~kdispatch.AioInformer` answers on its event loop's thread)."""

    _core: InformerCore

    def has_synced(self) -> bool:
        """True once the first list has been delivered to the handlers."""
        return self._core.synced

    @property
    def cache(self) -> Mapping[str, Obj]:
        """Live read-only view uid → newest object, as the handlers last saw it (plain JSON
        dicts, ``kind``/``apiVersion`` filled in; never mutate them). A single lookup is safe
        from any thread; to iterate from another thread, take :meth:`snapshot`."""
        return self._core.cache

    def snapshot(self) -> dict[str, Obj]:
        """A consistent copy of the cache (uid → object), taken under the informer's lock:
        safe to iterate from any thread. The objects themselves are shared, not copied."""
        return self._core.snapshot()

    @property
    def resource_version(self) -> str | None:
        """The last resourceVersion seen (list, event or bookmark)."""
        return self._core.resource_version

    @property
    def relists(self) -> int:
        """Lists delivered so far (the first one and every re-list)."""
        return self._core.relists

    @property
    def kind(self) -> str:
        """The kind listed and watched."""
        return self._core.kind

    @property
    def last_error(self) -> BaseException | None:
        """The newest list/watch failure, or None once a list succeeded or a watch since
        delivered an event (or ran its course)."""
        return self._core.last_error


__all__ = [
    "ADDED",
    "BOOKMARK",
    "DELETED",
    "MODIFIED",
    "PERMANENT_ERRORS",
    "Handler",
    "InformerCore",
    "InformerShell",
    "OnError",
    "check_dispatcher",
    "check_handlers",
    "check_settings",
    "decode_event",
    "describe_failure",
    "uid_of",
]
