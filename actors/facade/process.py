"""``ProcessDispatcher``: a real :class:`~kdispatch.Dispatcher` in a child process started
with ``spawn`` (never ``fork``: the caller has threads), so its threads do not compete with the
caller's for the interpreter lock; docs/process-dispatcher.md tells what differs.

Calls, informer objects and results cross by pickle over two pipes (:mod:`.process_link`,
:mod:`.process_child`); calls beyond ``max_in_flight`` wait here (:mod:`.process_window`).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import threading
import time
from collections.abc import Callable, Iterable
from ctypes import c_double
from functools import partial
from typing import Any, Final, NoReturn, Protocol, Self, cast

from loguru import logger

from kdispatch.actors.engine.aio import await_future
from kdispatch.actors.engine.messages import CallFuture
from kdispatch.actors.facade.dispatcher_like import fresh
from kdispatch.actors.model.call_types import default_call_types
from kdispatch.actors.model.calls import Call, CallTypeRegistry, plain_basis
from kdispatch.actors.model.config import MAX_WAIT, DispatcherConfig, check_positive, check_timeout
from kdispatch.actors.model.effects import when_gone
from kdispatch.actors.model.errors import (
    CallCancelled,
    DispatcherClosed,
    GroupsNotSupported,
    InvalidCallError,
    InvalidConfigError,
    InvalidObjectError,
    Outcome,
)
from kdispatch.actors.model.objects import Obj, ObjectRef, as_object, check_uid
from kdispatch.actors.runtime.gctuning import GcTuner

from .process_child import (
    CANCEL,
    OBSERVE,
    REVOKE,
    STOP,
    SUBMIT,
    BackendFactory,
    child_main,
    dumps,
    encode,
    write_batches,
)
from .process_link import ChildLink, DispatcherProcessDied
from .process_window import SendWindow

_MAX_WRITE = 1 << 20
"""Bytes of queued messages the writer joins into one pipe write at most."""

_KILL_AFTER = 10.0
"""Seconds after ``stop``'s deadline at which a child that has not closed its pipe is killed."""

MAX_IN_FLIGHT = 256
"""Default of ``ProcessDispatcher(max_in_flight=...)``: calls in the child and not yet
resolved, at most."""

CONTEXTS = ("spawn", "forkserver")
"""Start methods that never fork a process with threads."""


class SendDeadlines(Protocol):
    """What ``ProcessDispatcher(leader=...)`` takes:
    :class:`~kdispatch.adapters.leader.LeaseElector` is one."""

    @property
    def clock(self) -> Callable[[], float]:
        """The clock the deadlines are on; must be ``time.monotonic``."""
        ...

    def watch_send_deadline(self, observer: Callable[[float], None]) -> None:
        """Tell ``observer`` the send deadline now and at every change (``0.0``: closed)."""
        ...


class ProcessDispatcher(ChildLink):
    """A :class:`~kdispatch.Dispatcher` running in a child process, with the same caller API
    for what a scheduler uses (docs/process-dispatcher.md has an example). Every public
    method may be called from any thread. Scripts must guard their entry point
    (``if __name__ == "__main__":``), as with any ``spawn``."""

    def __init__(
        self,
        backend_factory: BackendFactory,
        config: DispatcherConfig | None = None,
        *,
        call_types: CallTypeRegistry | None = None,
        start_timeout: float = 60.0,
        context: str = "spawn",
        leader: SendDeadlines | None = None,
        max_in_flight: int | None = MAX_IN_FLIGHT,
    ) -> None:
        """Caller thread. Checks the arguments (each must pickle); starts nothing. With
        ``leader``, the child sends only while ``time.monotonic()`` is before the send deadline
        ``leader`` last told (closed until it first leads). ``max_in_flight``: calls in the
        child and not yet resolved, at most (None: no limit). Raises
        :class:`~kdispatch.InvalidConfigError`."""
        if not callable(backend_factory):
            raise InvalidConfigError("backend_factory must be a callable returning an ApiBackend")
        if config is None:
            config = DispatcherConfig()
        if not isinstance(config, DispatcherConfig):
            raise InvalidConfigError(
                f"config must be a DispatcherConfig, got {type(config).__name__}"
            )
        if call_types is not None and not isinstance(call_types, CallTypeRegistry):
            raise InvalidConfigError("call_types must be a CallTypeRegistry")
        if context not in CONTEXTS:
            raise InvalidConfigError(f"context must be one of {CONTEXTS}, got {context!r}")
        check_positive("start_timeout", start_timeout, finite=True)
        if leader is not None and not callable(getattr(leader, "watch_send_deadline", None)):
            raise InvalidConfigError("leader must offer watch_send_deadline (e.g. a LeaseElector)")
        if leader is not None and getattr(leader, "clock", None) is not time.monotonic:
            raise InvalidConfigError(
                "leader must measure its deadlines on time.monotonic: the child process compares "
                "them with its own CLOCK_MONOTONIC"
            )
        if max_in_flight is not None:
            check_positive("max_in_flight", max_in_flight, integer=True)
        for name, value in (("backend_factory", backend_factory), ("call_types", call_types)):
            try:
                dumps(value)
            except Exception as err:
                raise InvalidConfigError(f"{name} must pickle (spawn): {err}") from err
        self.config = config
        self.call_types = call_types if call_types is not None else default_call_types()
        self._child_call_types = call_types
        self._factory = backend_factory
        ChildLink.__init__(self, float(start_timeout))
        self._window = SendWindow(
            max_in_flight, self._outbox.put, _best_effort_room(config, max_in_flight)
        )
        self._mp: Any = multiprocessing.get_context(context)  # typeshed: a BaseContext
        self._state_lock = threading.Condition(threading.Lock())
        self._started = False
        self._closed = False
        self._stopped: bool | None = None  # the first stop()'s answer, once it returned
        self._revoked: DispatcherClosed | None = None
        self._last_stats: dict[str, Any] | None = None
        self._pid: int | None = None
        self._reader: threading.Thread | None = None
        self._writer: threading.Thread | None = None
        self._gc = GcTuner(config.runtime)
        # The send deadline shared with the child (0.0: closed); only the leader stores it
        self._send_until: c_double | None = None
        if leader is not None:
            self._send_until = cast("c_double", self._mp.RawValue("d", 0.0))
            leader.watch_send_deadline(self._store_send_deadline)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> Self:
        """Caller thread. Start the child and wait (at most ``start_timeout``) until its
        dispatcher runs. Re-raises what stopped the child's start (e.g. the backend factory's
        error); :class:`InvalidInputError` if already started or stopped."""
        with self._state_lock:
            self._mark_started()
        req_recv, req_send = self._mp.Pipe(duplex=False)
        res_recv, res_send = self._mp.Pipe(duplex=False)
        proc = self._mp.Process(
            target=child_main,
            args=(req_recv, res_send, self._factory, self.config, self._child_call_types),
            kwargs={"send_until": self._send_until},
            name="kdispatch-dispatcher",
            daemon=True,
        )
        proc.start()
        req_recv.close()  # the child's ends: closed here, so either side sees the other go
        res_send.close()
        self._proc, self._requests, self._results = proc, req_send, res_recv
        self._pid = proc.pid
        ready = self._await_ready(res_recv)
        if not ready[1]:  # end the child and close both pipes
            self._closed = True
            self._gone = DispatcherClosed("dispatcher process did not start")
            self._end_child(timeout=5.0)
            error = ready[2]
            raise error if isinstance(error, BaseException) else DispatcherProcessDied(str(error))
        self._reader = threading.Thread(
            target=self._read, name="kdispatch-process-reader", daemon=True
        )
        self._writer = threading.Thread(
            target=write_batches,
            args=(req_send, self._outbox, b"".join, _MAX_WRITE, len),
            name="kdispatch-process-writer",
            daemon=True,
        )
        self._reader.start()
        self._writer.start()
        self._gc.start()
        logger.debug("dispatcher process {} started", proc.pid)
        return self

    def stop(self, drain: bool = True, timeout: float | None = 30.0) -> bool:
        """Caller thread. :meth:`Dispatcher.stop <kdispatch.Dispatcher.stop>` in the child,
        which then exits (killed if it has not 10 s after the deadline; ``timeout`` None: no
        deadline, and this waits for the child without a limit). True if every call finished
        before the deadline. Idempotent: a later call returns the first one's answer. A
        ``timeout`` that is not a number >= 0 or None raises
        :class:`~kdispatch.InvalidInputError`, and stops nothing."""
        seconds = check_timeout(timeout, allow_zero=True)
        with self._state_lock:
            if self._closed or not self._started:
                self._closed = True
                if self._stopped is not None:
                    return self._stopped
                return self._final[0] if self._final is not None else not self._calls
            self._closed = True
        if drain:
            self._window.flush()  # the child drains them with the rest
        stopped = DispatcherClosed("dispatcher process stopped")
        self._resolve_waiting(self._window.close(), lambda _: fresh(stopped))
        with contextlib.suppress(DispatcherClosed):
            self._send(encode((STOP, bool(drain), seconds)))
        self._outbox.put(None)  # the writer sends what is queued, then ends
        if self._reader is not None:
            self._reader.join(None if seconds is None else min(seconds + _KILL_AFTER, MAX_WAIT))
        self._ending = True
        # the child closed its pipe (it is exiting): a moment to exit; else kill it now
        hung = self._reader is not None and self._reader.is_alive()
        self._end_child(timeout=0.0 if hung else 5.0)
        for thread in (self._reader, self._writer):
            if thread is not None:
                thread.join()
        self._fail_all(DispatcherClosed("dispatcher process stopped"))
        self._gc.stop()
        logger.debug("dispatcher process stopped")
        self._stopped = self._final[0] if self._final is not None else False
        return self._stopped

    # ------------------------------------------------------------------ calls

    def submit(self, call: Call, *, after: Iterable[object] = ()) -> CallFuture:
        """Any thread; one pickle and one queue put, never a wait for the child. Raises
        :class:`~kdispatch.InvalidInputError` subclasses for bad calls (fields that do not
        pickle included; a prerequisite in ``after``: :class:`~kdispatch.GroupsNotSupported`) and
        :class:`DispatcherClosed` (:class:`DispatcherProcessDied`, the revoking error) once
        the dispatcher is stopped, revoked or gone."""
        if after and _names_any(after):  # an empty collection or iterator names none
            raise GroupsNotSupported(
                "ProcessDispatcher does not hold calls on prerequisites (after=): chain the "
                "futures in the caller, or use an in-process Dispatcher"
            )
        self.call_types.check(call)
        call = plain_basis(call)
        self._check_open()
        fid = next(self._ids)
        try:
            data = encode((SUBMIT, fid, call), fid)
        except Exception as err:
            raise InvalidCallError(f"{call.call_type}: the call does not pickle: {err}") from err
        relevance = self.call_types.spec(call.call_type).relevance
        future = CallFuture()
        self._backlog.add(future, relevance)
        self._calls[fid] = future
        if self._gone is None:
            self._window.submit(fid, call.ref.uid, call.call_type, relevance, data)
        if self._gone is not None and self._pop_call(fid) is not None:
            # the reader's sweep ran before it was registered: whoever pops it resolves it
            self._window.discard(fid)
            raise fresh(self._gone)
        return future

    def group(self, owner: object, *, kind: str | None = None, gang: int | None = None) -> NoReturn:
        """Not supported here: raises :class:`~kdispatch.GroupsNotSupported`."""
        del owner, kind, gang
        raise GroupsNotSupported(
            "ProcessDispatcher does not build call groups: use an in-process Dispatcher"
        )

    def cancel(self, uid: str, call_type: str | None = None) -> None:
        """Any thread; never blocks. Withdraw the object's pending call (of ``call_type``, or
        any); its future resolves ``CallCancelled``. Before ``start``, after ``stop`` or once
        the child is gone there is nothing to withdraw: nothing happens, as on a
        :class:`~kdispatch.Dispatcher`."""
        check_uid(uid)
        if call_type is not None:
            self.call_types.spec(call_type)
        if self._closed or not self._started or self._gone is not None:
            return  # every call has resolved or will
        self._resolve_waiting(
            self._window.withdraw(uid, call_type),
            lambda t: CallCancelled(f"cancelled by caller: uid {uid}", uid=uid, call_type=t),
        )
        with contextlib.suppress(DispatcherClosed):  # the child went meanwhile
            self._send(encode((CANCEL, uid, call_type)))

    def revoke(self, error: DispatcherClosed) -> None:
        """Any thread; never blocks. :meth:`Dispatcher.revoke`, here and in the child. The
        child revokes even when ``error`` does not cross (it does not pickle, or its class is
        the caller's only), and the futures it fails still resolve with ``error``. The child
        revokes when it reads the message: a request its executor starts before then still
        goes out, so pair it with ``leader=``, whose send deadline closes at once."""
        if not self._mark_revoked(error):
            return
        self._resolve_waiting(self._window.withdraw_all(), lambda _: fresh(error))
        try:
            data: bytes | None = dumps(error)
        except Exception:  # the child revokes with a stand-in (revoking_error)
            data = None
        with contextlib.suppress(DispatcherClosed):
            self._send(encode((REVOKE, data, f"{type(error).__name__}: {error}")))

    @property
    def send_deadline(self) -> float | None:
        """Any thread. The send deadline the child reads (``time.monotonic`` seconds; 0.0 while
        the leader does not lead), or None without ``leader``."""
        return self._send_until.value if self._send_until is not None else None

    def _store_send_deadline(self, deadline: float) -> None:
        """The leader's thread, under its lock: one store into shared memory."""
        assert self._send_until is not None
        self._send_until.value = float(deadline)

    def view(self, uid: str, timeout: float | None = 5.0) -> Obj | None:
        """Caller thread (one round trip to the child). :meth:`Dispatcher.view`; raises
        :class:`DispatcherClosed` when the child is not running, ``TimeoutError`` after
        ``timeout`` seconds (the only limit: the child waits for the object's actor without
        one), :class:`~kdispatch.InvalidInputError` for a ``timeout`` that is not a positive
        number or None."""
        check_uid(uid)
        seconds = check_timeout(timeout)
        return cast("Obj | None", self._query("view", uid, seconds))

    async def _aview(self, uid: str, timeout: float | None) -> Obj | None:
        """Event-loop thread: :meth:`aview`'s answer, posted to the loop by the reader."""
        qid, future = self._ask("view", uid)
        try:
            return cast("Obj | None", await await_future(future, timeout))
        finally:
            self._queries.pop(qid, None)

    def freeze_gc(self) -> None:
        """Caller thread (one round trip). :meth:`Dispatcher.freeze_gc` in both processes."""
        self._query("freeze_gc", None, 30.0)
        self._gc.freeze()

    # ------------------------------------------------------------------ informer callbacks

    def on_delete(self, obj: object, kind: str | None = None) -> None:
        """Informer thread; never blocks. Cancels the object's pending calls, tombstones it."""
        self._observe(obj, kind, deleted=True)

    def _observe(self, obj: object, kind: str | None, *, deleted: bool = False) -> None:
        """Informer thread. Bad objects raise here, on the caller's thread, before anything
        changes: :class:`~kdispatch.InvalidObjectError` (one that does not pickle included)."""
        plain = as_object(obj)
        uid = ObjectRef.of(plain, kind).uid
        if self._closed or self._gone is not None:
            return  # nothing left to feed: every call has resolved or will
        try:
            data = encode((OBSERVE, plain, kind, deleted))
        except Exception as err:
            raise InvalidObjectError(f"{uid}: the object does not pickle: {err}") from err
        if deleted:
            self._resolve_waiting(self._window.withdraw(uid), partial(self._deleted_outcome, uid))
        with contextlib.suppress(DispatcherClosed):
            self._send(data)

    def _deleted_outcome(self, uid: str, call_type: str) -> Outcome | CallCancelled:
        """How a call of ``call_type`` waiting in the window ends when its object ``uid`` was
        deleted (:func:`~kdispatch.actors.model.effects.when_gone`). Any thread."""
        cancelled = CallCancelled(f"object deleted: uid {uid}", uid=uid, call_type=call_type)
        return when_gone(self.call_types.spec(call_type), cancelled)

    # ------------------------------------------------------------------ introspection

    @property
    def waiting(self) -> int:
        """Calls waiting in this process for room in the child (``max_in_flight``)."""
        return self._window.waiting

    @property
    def in_flight(self) -> int:
        """Calls sent to the child and not yet resolved."""
        return self._window.in_flight

    @property
    def pid(self) -> int | None:
        """The child's process id (None before ``start``)."""
        return self._pid

    def stats(self) -> dict[str, Any]:
        """Caller thread (one round trip; while stopping, the previous answer; after
        ``stop``, the child's last figures). The child's :meth:`Dispatcher.stats
        <kdispatch.Dispatcher.stats>`, plus ``pid``, the child's process id. Raises
        :class:`DispatcherClosed` when there are no figures to give: before ``start``, while
        stopping with no answer before, or once the child died before this process had any of
        its figures."""
        if self._final is not None:
            out = dict(self._final[1])
        elif (self._closed or self._gone is not None) and self._last_stats is not None:
            out = dict(self._last_stats)  # stopping or gone: the child answers no more queries
        else:
            out = dict(cast("dict[str, Any]", self._query("stats", None, 10.0)))
            self._last_stats = out
        out["pid"] = self.pid
        return out

    @property
    def tokens_taken(self) -> int:
        """Rate-limiter tokens used so far (one round trip)."""
        return int(self.stats()["tokens_taken"])


def _best_effort_room(config: DispatcherConfig, max_in_flight: int | None) -> int | None:
    """Best-effort calls (Events) in the child, at most: twice what its executor sends at once
    (a quarter of its workers); None without a window."""
    if max_in_flight is None:
        return None
    return min(max_in_flight, 2 * max(1, config.executor.workers // 4))


def _names_any(after: Iterable[object]) -> bool:
    """Whether ``after`` (an iterator, or anything else that is not an empty collection) names
    a prerequisite; what is not iterable counts as one, to be refused. Caller thread."""
    try:
        return next(iter(after), _NONE) is not _NONE
    except TypeError:
        return True


_NONE: Final = object()


__all__ = ["CONTEXTS", "DispatcherProcessDied", "ProcessDispatcher", "SendDeadlines"]
