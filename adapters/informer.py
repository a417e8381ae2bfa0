"""The threaded informer: :class:`Informer` runs the list+watch loop of one kind on a thread of
its own around an :class:`~kdispatch.adapters.informer_core.InformerCore`, fed by a
:class:`ListWatch` source; :class:`ClientListWatch` is the source over the official client
(:class:`~kdispatch.KubernetesBackend`'s ``list_all``/``watch``). The behaviour, and why not the
official client's ``SharedInformer``: the "Informers" guide (``docs/informers.md``).
"""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from collections.abc import Iterator
from typing import Any, NamedTuple, Protocol

from kubernetes import client as k8s
from prometheus_client import CollectorRegistry, Counter

from kdispatch.actors.model.config import check_timeout
from kdispatch.actors.model.errors import ApiError, GoneError, InvalidInputError
from kdispatch.actors.model.kinds import KindInfo, KindTable

from .informer_core import (
    BOOKMARK,
    Handler,
    InformerCore,
    InformerShell,
    Obj,
    OnAdd,
    OnDelete,
    OnError,
    OnUpdate,
    WatchLoop,
    check_dispatcher,
    check_handlers,
    check_settings,
    decode_event,
)
from .kubernetes import KubernetesBackend
from .rest import check_scope, with_type_meta
from .transport import TransportName, translate_errors


class WatchEvent(NamedTuple):
    """One watch event: ``type`` is ADDED, MODIFIED, DELETED or BOOKMARK."""

    type: str
    object: Obj


class WatchStream(Protocol):
    """An open watch. Iterated on the informer thread; iteration ends when the server closes
    the stream, and raises :class:`ApiError` (``GoneError`` for 410) on failures."""

    def __iter__(self) -> Iterator[WatchEvent]: ...

    def stop(self) -> None:
        """End the stream from any thread; a blocked iteration returns promptly."""
        ...


class ListWatch(Protocol):
    """Where an informer gets its objects from. Called on the informer thread.

    A source may also have a ``server`` attribute (the apiserver's URL, or None): the
    informer names it when it cannot connect (:class:`ClientListWatch` has one)."""

    kind: str

    def list(self) -> tuple[list[Obj], str]:
        """All current objects and the resourceVersion to watch from."""
        ...

    def watch(self, resource_version: str, timeout_seconds: float) -> WatchStream:
        """Changes after ``resource_version`` for at most ``timeout_seconds``. May raise
        ``GoneError`` when the resourceVersion is too old."""
        ...


# --------------------------------------------------------------------------- official client


class ClientListWatch:
    """:class:`ListWatch` over the official client, for any kind of the kind table, with
    label/field selectors (see the Informers guide).

    ``api``: an ``ApiClient`` (give informers their own: watches hold a pooled connection) or
    a :class:`KubernetesBackend` (its client is used). Lists fetch ``page_size`` objects per
    request; watches ask for bookmarks. Bad arguments raise :class:`InvalidInputError`
    subclasses (an unknown kind ``UnknownKindError``).
    """

    def __init__(
        self,
        api: k8s.ApiClient | KubernetesBackend,
        kind: str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        request_timeout: float = 30.0,
        page_size: int = 500,
        transport: TransportName = "lean",
        kinds: KindTable | None = None,
    ) -> None:
        if isinstance(api, KubernetesBackend):  # its client, and its kinds unless given
            kinds = api.kinds if kinds is None else kinds
            api = api.api_client
        if not isinstance(api, k8s.ApiClient):
            raise InvalidInputError(
                f"api must be a kubernetes ApiClient or a KubernetesBackend, got {api!r}"
            )
        for label, value in (
            ("label_selector", label_selector),
            ("field_selector", field_selector),
        ):
            if value is not None and (not isinstance(value, str) or not value):
                raise InvalidInputError(f"{label} must be a non-empty str or None, got {value!r}")
        if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size < 1:
            raise InvalidInputError(f"page_size must be a positive int, got {page_size!r}")
        # first: it checks kinds, request_timeout and transport (InvalidConfigError)
        self._backend = KubernetesBackend(
            api, request_timeout=request_timeout, transport=transport, kinds=kinds
        )
        self._info = self._backend.kinds.lookup(kind)
        self.kind = self._info.kind
        self._namespace = check_scope(self._info, namespace)
        self._labels = label_selector
        self._fields = field_selector
        self._page_size = page_size
        host = getattr(api.configuration, "host", None)
        self.server: str | None = host if isinstance(host, str) and host else None
        """The apiserver's URL (named by ``wait_for_sync`` when it cannot connect)."""

    def list(self) -> tuple[list[Obj], str]:
        """Informer thread."""
        items, rv = self._backend.list_all(
            self.kind,
            self._namespace,
            label_selector=self._labels,
            field_selector=self._fields,
            page_size=self._page_size,
        )
        return list(items), rv

    def watch(self, resource_version: str, timeout_seconds: float) -> WatchStream:
        """Informer thread."""
        resp = self._backend.watch(
            self.kind,
            self._namespace,
            resource_version=resource_version,
            timeout_seconds=max(1, int(timeout_seconds)),
            label_selector=self._labels,
            field_selector=self._fields,
        )
        return _HttpWatchStream(resp, self._info, f"watch {self.kind}")


class _HttpWatchStream:
    """JSON lines of a chunked watch reply. ``stop`` shuts the socket down for reading, which
    unblocks the informer thread; the response is then closed (never returned to the pool)."""

    def __init__(self, resp: Any, info: KindInfo, what: str) -> None:
        self._resp = resp
        self._info = info
        self._what = what
        self._lock = threading.Lock()
        self._stopped = False
        self._closed = False

    def __iter__(self) -> Iterator[WatchEvent]:
        try:
            with translate_errors(self._what):
                for line in self._resp:  # urllib3 splits the chunks into lines
                    if line.strip():
                        event_type, obj = decode_event(line, self._what)
                        if event_type != BOOKMARK:
                            obj = with_type_meta(obj, self._info)
                        yield WatchEvent(event_type, obj)
        except ApiError:
            with self._lock:
                if self._stopped:
                    return
            raise
        finally:
            self._close()

    def _close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._resp.close()
        self._resp.release_conn()

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            if self._closed:
                return
            # ValueError/RuntimeError: already released or never connected
            with contextlib.suppress(ValueError, RuntimeError, OSError):
                self._resp.shutdown()


# --------------------------------------------------------------------------- the informer


_error_counters: weakref.WeakKeyDictionary[CollectorRegistry, Counter] = weakref.WeakKeyDictionary()
_counters_lock = threading.Lock()


def informer_errors(registry: CollectorRegistry) -> Counter:
    """The ``kdispatch_informer_errors_total`` counter of ``registry``, shared by every
    informer registered there. Any thread."""
    with _counters_lock:
        counter = _error_counters.get(registry)
        if counter is None:
            counter = Counter(
                "kdispatch_informer_errors_total",
                "Informer list/watch failures, by informer, kind and error reason.",
                ["informer", "kind", "reason"],
                registry=registry,
            )
            _error_counters[registry] = counter
        return counter


class Informer(InformerShell):
    """List+watch loop for one kind, on a thread of its own: a UID-keyed cache, and handlers
    called in order (the Informers guide describes the loop: resumed watches, re-lists on
    410 Gone, backoff, errors).

    ``name`` labels the thread and the logs. ``resync``: every this many seconds, replay every
    cached object to ``on_update(obj, obj)`` (None: never). ``watch_timeout``: the longest
    single watch request (server-side timeout) before it is renewed. Reconnects wait
    ``backoff_initial`` doubling to ``backoff_max``, with 20 % jitter. Each of these numbers
    must be > 0 and at most :data:`~kdispatch.adapters.informer_core.LONGEST_SETTING` seconds;
    anything else (NaN, infinity) raises :class:`~kdispatch.InvalidInputError` here, and so
    does a ``list_watch`` without a ``kind``, ``list()`` or ``watch()``.

    Handlers are added before :meth:`start` and run on the informer thread; they must be quick
    (the dispatcher's only ``tell``). ``start``/``stop``/``has_synced``/``wait_for_sync``,
    :attr:`cache` and :meth:`snapshot` may be used from any thread.
    """

    def __init__(
        self,
        list_watch: ListWatch,
        *,
        name: str,
        resync: float | None = None,
        backoff_initial: float = 0.05,
        backoff_max: float = 5.0,
        watch_timeout: float = 300.0,
        on_error: OnError | None = None,
        metrics_registry: CollectorRegistry | None = None,
    ) -> None:
        backoff = check_settings(
            on_error,
            backoff_initial,
            backoff_max,
            watch_timeout=watch_timeout,
            resync=1.0 if resync is None else resync,
        )
        if metrics_registry is not None and not isinstance(metrics_registry, CollectorRegistry):
            raise InvalidInputError("metrics_registry must be a prometheus CollectorRegistry")
        if not isinstance(name, str) or not name:
            raise InvalidInputError(f"name must be a non-empty str, got {name!r}")
        self._lw = list_watch
        kind = getattr(list_watch, "kind", None)
        if not isinstance(kind, str) or not kind:
            raise InvalidInputError(f"list_watch must have a kind, got {kind!r}")
        for method in ("list", "watch"):
            if not callable(getattr(list_watch, method, None)):
                raise InvalidInputError(f"list_watch must be a ListWatch: it has no {method}()")
        server = getattr(list_watch, "server", None)
        self._server = server if isinstance(server, str) else None
        self._errors = informer_errors(metrics_registry or CollectorRegistry()).labels
        self._state = threading.Condition(threading.Lock())  # synced / last_error changes
        self.name = name
        self._resync = resync
        self._watch_timeout = float(watch_timeout)
        self._lock = threading.Lock()  # guards cache writes, _stream, _thread
        self._core = InformerCore(
            name=name, kind=kind, lock=self._lock, backoff=backoff, on_error=on_error
        )
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._stream: WatchStream | None = None
        self._progress = False  # the current watch delivered something
        self.watches = 0

    # ----------------------------------------------------------------- public API

    def add_handler(
        self,
        on_add: OnAdd | None = None,
        on_update: OnUpdate | None = None,
        on_delete: OnDelete | None = None,
    ) -> None:
        """Register callbacks (any may be None). Only before :meth:`start`. Raises
        :class:`~kdispatch.InvalidInputError` for one that is not callable, or once started."""
        check_handlers(on_add, on_update, on_delete)
        with self._lock:
            if self._thread is not None:
                raise InvalidInputError("add handlers before starting the informer")
            self._core.add_handler(Handler(on_add, on_update, on_delete))

    def attach(self, dispatcher: Any) -> None:
        """Feed ``dispatcher.on_add/on_update/on_delete(obj)`` (the dispatcher facade). Raises
        :class:`~kdispatch.InvalidInputError` when it lacks one of them."""
        check_dispatcher(dispatcher)
        self.add_handler(
            dispatcher.on_add, lambda _old, new: dispatcher.on_update(new), dispatcher.on_delete
        )

    def start(self) -> Informer:
        """Start the list+watch thread (once). Any thread. Raises
        :class:`~kdispatch.InvalidInputError` when it was started before, or stopped (a stopped
        informer never runs again: build a new one)."""
        with self._lock:
            if self._thread is not None:
                raise InvalidInputError(f"informer {self.name} already started")
            if self._stop.is_set():
                raise InvalidInputError(f"informer {self.name} was stopped: build a new one")
            self._thread = threading.Thread(
                target=self._run, name=f"informer-{self.name}", daemon=True
            )
            thread = self._thread
        thread.start()
        return self

    def stop(self, timeout: float | None = 5.0) -> bool:
        """Stop the loop: interrupts a backoff wait and cuts the open watch; no further event
        reaches the handlers (not even the rest of a list being delivered). A request waiting
        for the server's reply (a list, a watch whose reply has not begun) is not cut: it ends
        within the list-watch's request timeout, and the thread with it. True once the
        thread has ended within ``timeout``. Any thread; on the informer's own (a handler or
        an ``on_error`` hook) it cannot wait for itself: it returns False at once and the
        loop ends when the hook returns. ``timeout``: seconds >= 0, or None for no limit
        (:class:`~kdispatch.InvalidInputError` otherwise, before anything stops)."""
        seconds = check_timeout(timeout, allow_zero=True)
        self._stop.set()
        self._core.halt()
        with self._state:  # wakes wait_for_sync
            self._state.notify_all()
        with self._lock:
            stream, thread = self._stream, self._thread
        if stream is not None:
            stream.stop()
        if thread is None:
            return True
        if thread is threading.current_thread():
            return False
        thread.join(seconds)
        return not thread.is_alive()

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        """Block until :meth:`has_synced`, then return True; False if the informer is (or
        gets) stopped before it synced, as client-go's ``WaitForCacheSync``. Any thread.

        Raises :class:`~kdispatch.InformerSyncTimeout` (a ``TimeoutError``)
        when ``timeout`` seconds pass first: its ``last_error`` is the newest failure and its
        message names it (``cannot connect to http://...: ...``). Raises
        ``UnauthorizedError``/``ForbiddenError`` as soon as a list is refused for that reason
        while waiting (the informer keeps retrying: a refreshed token fixes it).
        ``timeout``: seconds >= 0, or None for no limit (:class:`~kdispatch.InvalidInputError`
        otherwise)."""
        timeout = check_timeout(timeout, allow_zero=True)
        core = self._core
        with self._state:
            seen = core.errors
            self._state.wait_for(
                lambda: core.synced or self._stop.is_set() or core.sync_failure(seen) is not None,
                timeout,
            )
            if core.synced:
                return True
            failure = core.sync_failure(seen)
            if failure is not None:
                raise failure
            if self._stop.is_set():
                return False
            raise core.sync_timeout(timeout, self._server)

    # ----------------------------------------------------------------- the loop

    def _run(self) -> None:
        """Informer thread: list, then watch and resume until stopped (see :class:`WatchLoop`)."""
        core = self._core
        plan = WatchLoop()
        last_resync = time.monotonic()
        while not self._stop.is_set():
            self._progress = False
            try:
                if plan.need_list:
                    items, rv = self._lw.list()
                    if self._stop.is_set():
                        break
                    core.listed(items, rv)
                    plan.listed()
                    with self._state:
                        self._state.notify_all()
                if self._resync is not None and time.monotonic() - last_resync >= self._resync:
                    core.replay()
                    last_resync = time.monotonic()
                if plan.watched(self._progress, self._run_watch(last_resync)):
                    with self._state:
                        core.progressed()
                    continue
            except GoneError as exc:
                core.log.info("watch expired ({}); re-listing", exc)
                self._errors(self.name, self.kind, exc.reason).inc()
                if plan.gone(self._progress):
                    continue
            except ApiError as exc:
                if self._stop.is_set():
                    break  # stopped meanwhile: no hook hears of that request
                core.log.warning("{} failed: {}", "list" if plan.need_list else "watch", exc)
                plan.failed(exc, self._progress)
                self._report(exc, exc.reason)
            except Exception as exc:
                if self._stop.is_set():
                    break
                core.log.exception("informer loop error")
                plan.failed(exc, self._progress)
                self._report(exc, type(exc).__name__)
            self._stop.wait(core.retry_delay(plan.failures))
        core.log.debug("informer stopped")

    def _report(self, exc: BaseException, reason: str) -> None:
        """Record a failure: last_error, the metric, the hook. Informer thread."""
        with self._state:
            self._core.failed(exc)
            self._state.notify_all()
        self._errors(self.name, self.kind, reason).inc()
        self._core.tell_error(exc)

    def _run_watch(self, last_resync: float) -> bool:
        """One watch request (``_progress`` says whether it delivered anything); whether it
        ran its full course."""
        timeout = self._watch_timeout
        if self._resync is not None:
            timeout = max(0.05, min(timeout, last_resync + self._resync - time.monotonic()))
        rv = self._core.resource_version
        assert rv is not None
        stream = self._lw.watch(rv, timeout)
        self.watches += 1
        with self._lock:
            self._stream = stream
        if self._stop.is_set():
            stream.stop()
        started = time.monotonic()
        events = iter(stream)
        try:
            for event in events:
                if self._stop.is_set():
                    break
                self._core.event(event.type, event.object)
                if not self._progress:  # its first event: the watch works (again)
                    self._progress = True
                    if self._core.last_error is not None:
                        with self._state:
                            self._core.progressed()
        finally:
            stream.stop()
            close = getattr(events, "close", None)
            if close is not None:  # a generator: run its cleanup now, not at garbage collection
                close()
            with self._lock:
                self._stream = None
        return time.monotonic() - started >= min(timeout, 1.0)


__all__ = [
    "BOOKMARK",
    "ClientListWatch",
    "Informer",
    "ListWatch",
    "Obj",
    "OnAdd",
    "OnDelete",
    "OnError",
    "OnUpdate",
    "WatchEvent",
    "WatchStream",
    "informer_errors",
    "with_type_meta",
]
