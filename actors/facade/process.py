"""``ProcessDispatcher``: the dispatcher in a child process, so its threads do not share the
caller's interpreter lock.

A :class:`~kdispatch.Dispatcher` runs its object actors, its executor's
workers and the backend's HTTP client as Python threads of the caller's process; every one of
them competes with the scheduling threads for the one interpreter lock, and a submit waits for
it. ``ProcessDispatcher`` starts a real ``Dispatcher`` in a child interpreter
(``multiprocessing`` with the ``spawn`` context, never ``fork``: the caller has threads) and
keeps in the caller only what a scheduler needs: ``submit`` pickles the call and queues it; one
writer thread sends everything queued in one pipe write (so a child that reads slowly never
blocks a caller), and one reader thread resolves the futures from the child's results, which
arrive coalesced too (see :mod:`kdispatch.actors.facade.process_child`).

What differs from the in-process dispatcher:

* the backend is built **in the child** from ``backend_factory``, a picklable callable (e.g.
  ``functools.partial(KubernetesBackend.from_kubeconfig, path, workers=32)``); an in-memory
  apiserver of the caller cannot be shared with the child, so serve it over HTTP
  (:class:`~kdispatch.testing.httpserver.ApiServerHTTP`) and point the factory at its URL;
* calls, informer objects and results cross by pickle: a call whose fields do not pickle is
  rejected at ``submit`` with :class:`~kdispatch.InvalidCallError`;
* errors the child's ``submit`` raises (the actor cap, a revoked dispatcher) arrive on the
  future instead of at ``submit``;
* ``RuntimeConfig``'s garbage-collector settings (``gc_freeze``, ``gc_young_threshold``) are
  process-wide, so they apply in both processes, from ``start`` to ``stop``, as they would to
  the one process of an in-process dispatcher;
* metrics live in the child's own registry; :meth:`ProcessDispatcher.stats` brings the
  figures across;
* a ``send_gate`` callable cannot cross, so leader election is wired with ``leader=`` (a
  :class:`~kdispatch.adapters.leader.LeaseElector`): the elector tells this dispatcher its
  send deadline (:meth:`~kdispatch.adapters.leader.LeaseElector.watch_send_deadline`) and it
  is stored in a shared-memory ``double`` the child's executor compares with
  ``time.monotonic()`` right before every request, with no pipe round trip. The gate starts
  closed, opens while the elector leads, and closes at the renew deadline by the clock alone:
  a parent that died or stalled stops renewing, so the child stops sending at the deadline.
  As with the in-process dispatcher, the elector's ``on_lost`` should :meth:`revoke` it so
  the calls not yet sent resolve at once instead of at their turn;
* back-pressure: at most ``max_in_flight`` calls are sent to the child and not yet resolved
  (:class:`~kdispatch.actors.facade.process_window.SendWindow`), of them at most twice as many
  Events as the child's executor sends at once; beyond that, calls wait in this
  process in lanes by relevance, so a binding or a deletion submitted behind thousands of
  status patches overtakes them instead of queueing behind them in the pipe, and ``submit``
  still never blocks. One object's calls keep their order. A call waiting here is not yet
  known to the child: :meth:`~ProcessDispatcher.view` does not show it; ``cancel``,
  ``on_delete``, ``revoke``, ``stop`` and the child's death resolve it here, as the child
  would have. A caller that would rather hold back than pile calls up opts in with
  :meth:`~ProcessDispatcher.wait_backlog` (woken by the reader thread as results arrive);
* ``asubmit`` and ``aview`` are the asyncio forms, as on the in-process dispatcher (the
  helpers of :mod:`kdispatch.actors.engine.aio`): the reader thread posts each result to the loop;
* if the child dies, every pending future fails with :class:`DispatcherProcessDied` (a
  :class:`~kdispatch.DispatcherClosed`) and ``submit`` raises it from then on;
* calls held on prerequisites (``after=``) and call groups (``group(owner=...)``) are not
  supported: they raise :class:`~kdispatch.GroupsNotSupported` (a
  prerequisite's future lives in this process and its call in the child; chain the futures
  in the caller, or use an in-process ``Dispatcher``).

Scripts that use it must guard their entry point (``if __name__ == "__main__":``), as every
``spawn`` user must: the child imports the main module.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import itertools
import multiprocessing
import pickle
import queue
import threading
import time
from collections.abc import Callable, Coroutine, Iterable
from concurrent.futures import Future
from ctypes import c_double
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any, NoReturn, Protocol, Self, cast

from loguru import logger

from kdispatch.actors.engine.aio import await_future, check_timeout, running_loop, wrap_call_future
from kdispatch.actors.engine.messages import CallFuture
from kdispatch.actors.facade.dispatcher_like import Backlog, DispatcherLike, lane_level
from kdispatch.actors.model.call_types import default_call_types
from kdispatch.actors.model.calls import Call, CallTypeRegistry, plain_basis
from kdispatch.actors.model.config import DispatcherConfig
from kdispatch.actors.model.errors import (
    CallCancelled,
    CallFailed,
    DispatcherClosed,
    GroupsNotSupported,
    InvalidCallError,
    InvalidConfigError,
    InvalidInputError,
    Outcome,
)
from kdispatch.actors.model.objects import Obj, ObjectRef, as_object, check_uid
from kdispatch.actors.runtime.gctuning import GcTuner

from .process_child import (
    CANCEL,
    OBSERVE,
    QUERY,
    READY,
    REVOKE,
    STOP,
    STOPPED,
    SUBMIT,
    BackendFactory,
    Result,
    child_main,
    dumps,
)
from .process_window import SendWindow

_MAX_WRITE = 1 << 20
"""Bytes of queued messages the writer joins into one pipe write at most."""

MAX_IN_FLIGHT = 256
"""Default of ``ProcessDispatcher(max_in_flight=...)``: calls sent to the child and not yet
resolved, at most. Enough to keep a few dozen executor workers busy while the child merges,
few enough that the child takes in a binding within milliseconds."""

CONTEXTS = ("spawn", "forkserver")
"""Start methods that never fork a process with threads."""


class DispatcherProcessDied(DispatcherClosed):
    """The dispatcher's child process exited without being asked to (killed, crashed, out of
    memory). Every call pending at that moment fails with it, and ``submit`` raises it."""


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


class ProcessDispatcher(DispatcherLike):
    """A :class:`~kdispatch.Dispatcher` running in a child process; the same
    caller API for what a scheduler uses. Every public method may be called from any thread.

    Typical use::

        factory = functools.partial(KubernetesBackend.from_kubeconfig, path, workers=32)
        with ProcessDispatcher(factory, DispatcherConfig()) as dispatcher:
            future = dispatcher.submit(PodBinding.for_pod(pod, "node-1"))

    With leader election, the elector gates the child's sends (see the module docstring)::

        elector = LeaseElector(client, election, on_lost=lambda err: dispatcher.revoke(err))
        dispatcher = ProcessDispatcher(factory, config, leader=elector).start()
    """

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
        ``leader``, the child sends a request only while ``time.monotonic()`` is before the
        send deadline ``leader`` last told (closed until it first leads); this registers the
        observer on ``leader`` (:attr:`send_deadline` follows it from now on).
        ``max_in_flight``: calls sent to the child and not yet resolved, at most (None: no
        limit); the others wait here by relevance (see the module docstring). Raises
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
        if not isinstance(start_timeout, int | float) or not start_timeout > 0:
            raise InvalidConfigError(f"start_timeout must be > 0, got {start_timeout!r}")
        _check_leader(leader)
        _check_max_in_flight(max_in_flight)
        for name, value in (("backend_factory", backend_factory), ("call_types", call_types)):
            try:
                dumps(value)
            except Exception as err:
                raise InvalidConfigError(f"{name} must pickle (spawn): {err}") from err
        self.config = config
        self.call_types = call_types if call_types is not None else default_call_types()
        self._child_call_types = call_types
        self._factory = backend_factory
        self._start_timeout = float(start_timeout)
        self._mp: Any = multiprocessing.get_context(context)  # typeshed: a BaseContext
        self._ids = itertools.count()
        self._calls: dict[int, CallFuture] = {}
        # The futures of _calls counted per lane, and wait_backlog's waiters: whoever pops a
        # future from _calls pops its lane too (_settled)
        self._backlog = Backlog()
        self._queries: dict[int, Future[Any]] = {}
        self._state_lock = threading.Lock()
        self._started = False
        self._closing = False
        self._stopped = False
        self._gone: DispatcherClosed | None = None
        self._revoked: DispatcherClosed | None = None
        self._final: tuple[bool, dict[str, Any]] | None = None
        self._last_stats: dict[str, Any] | None = None
        self._proc: BaseProcess | None = None
        self._pid: int | None = None
        self._requests: Connection | None = None
        self._results: Connection | None = None
        self._reader: threading.Thread | None = None
        self._writer: threading.Thread | None = None
        self._outbox: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._window = SendWindow(
            max_in_flight, self._outbox.put, _best_effort_room(config, max_in_flight)
        )
        self._gc = GcTuner(config.runtime)
        # The send deadline on CLOCK_MONOTONIC, shared with the child (0.0: closed). Only
        # the leader's observer stores into it, under the leader's lock.
        self._send_until: c_double | None = None
        if leader is not None:
            self._send_until = cast("c_double", self._mp.RawValue("d", 0.0))
            leader.watch_send_deadline(self._store_send_deadline)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> Self:
        """Caller thread. Start the child, wait until its dispatcher runs (at most
        ``start_timeout``), start the reader thread. Re-raises what stopped the child's start
        (e.g. the backend factory's error). Raises :class:`InvalidInputError` if already
        started, or once stopped (create a new ProcessDispatcher instead)."""
        with self._state_lock:
            if self._stopped:
                raise InvalidInputError("dispatcher stopped: create a new ProcessDispatcher")
            if self._started:
                raise InvalidInputError("dispatcher already started")
            self._started = True
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
        if not ready[1]:
            self._abandon()
            error = ready[2]
            raise error if isinstance(error, BaseException) else DispatcherProcessDied(str(error))
        self._reader = threading.Thread(
            target=self._read, name="kdispatch-process-reader", daemon=True
        )
        self._writer = threading.Thread(
            target=self._write, name="kdispatch-process-writer", daemon=True
        )
        self._reader.start()
        self._writer.start()
        self._gc.start()
        logger.debug("dispatcher process {} started", proc.pid)
        return self

    def _await_ready(self, results: Connection) -> Result:
        try:
            if results.poll(self._start_timeout):
                batch = cast("list[Result]", pickle.loads(results.recv_bytes()))
                if batch and batch[0][0] == READY:
                    return batch[0]
        except (EOFError, OSError):
            pass
        code = self._proc.exitcode if self._proc is not None else None
        return (READY, False, DispatcherProcessDied(f"dispatcher process did not start ({code})"))

    def _abandon(self) -> None:
        """Caller thread: end a child that failed to start and close both pipes."""
        self._closing = self._stopped = True
        self._gone = DispatcherClosed("dispatcher process did not start")
        self._end_child(timeout=5.0)

    def __enter__(self) -> Self:
        return self.start() if not self._started else self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self, drain: bool = True, timeout: float = 30.0) -> bool:
        """Caller thread. Stop intake; the child stops its dispatcher (``drain``: pending calls
        may finish until ``timeout``; what is left resolves ``DispatcherClosed``), sends the
        last results and exits; the child is joined (killed if it does not exit within 10 s
        after the deadline) and the reader thread ends. Returns True if every call finished
        before the deadline. Idempotent."""
        with self._state_lock:
            if self._stopped or not self._started:
                self._closing = self._stopped = True
                return self._final[0] if self._final is not None else not self._calls
            self._closing = True
            self._stopped = True
        if drain:
            self._window.flush()  # the child drains them with the rest
        stopped = DispatcherClosed("dispatcher process stopped")
        self._resolve_waiting(self._window.close(), lambda _: copy.copy(stopped))
        with contextlib.suppress(DispatcherClosed):
            self._send(dumps((STOP, bool(drain), float(timeout))))
        self._outbox.put(None)  # the writer sends what is queued, then ends
        if self._reader is not None:
            self._reader.join(timeout + 10.0)
        self._end_child(timeout=5.0)
        for thread in (self._reader, self._writer):
            if thread is not None:
                thread.join()
        self._fail_all(DispatcherClosed("dispatcher process stopped"))
        self._gc.stop()
        logger.debug("dispatcher process stopped")
        return self._final[0] if self._final is not None else False

    def _end_child(self, *, timeout: float) -> None:
        proc = self._proc
        if proc is not None:
            proc.join(timeout)
            if proc.is_alive():
                logger.warning("dispatcher process {} did not exit: killing it", proc.pid)
                proc.kill()
                proc.join()
        for conn in (self._requests, self._results):
            if conn is not None:
                with contextlib.suppress(OSError):
                    conn.close()
        if proc is not None:
            with contextlib.suppress(ValueError):
                proc.close()

    # ------------------------------------------------------------------ calls

    def submit(self, call: Call, *, after: Iterable[object] = ()) -> CallFuture:
        """Any thread; returns after one pickle and one queue put (the writer thread sends it,
        or the call waits here while ``max_in_flight`` calls are in the child), never waits
        for the child.
        Raises :class:`~kdispatch.InvalidInputError` subclasses for bad calls
        (an unregistered type, a wrong kind, fields that do not pickle; any ``after``:
        :class:`~kdispatch.GroupsNotSupported`) and
        :class:`DispatcherClosed` (:class:`DispatcherProcessDied`, the revoking error) once
        the dispatcher is stopped, revoked or gone."""
        _refuse_after(after)
        self.call_types.check(call)
        call = plain_basis(call)
        self._check_open()
        fid = next(self._ids)
        try:
            data = dumps((SUBMIT, fid, call))
        except Exception as err:
            raise InvalidCallError(f"{call.call_type}: the call does not pickle: {err}") from err
        relevance = self.call_types.spec(call.call_type).relevance
        future = CallFuture()
        lane = self._backlog.lane(relevance)
        lane.append(None)  # counted before anyone can pop the future
        future.lane = lane
        self._calls[fid] = future
        if self._gone is None:
            self._window.submit(fid, call.ref.uid, call.call_type, relevance, data)
        if self._gone is not None and self._calls.pop(fid, None) is not None:
            # The reader's sweep may have run before this future was registered: whoever
            # pops a future resolves it, so it is resolved (here: raised) exactly once.
            self._settled(future)
            self._window.discard(fid)
            raise copy.copy(self._gone)
        return future

    def asubmit(self, call: Call, *, after: Iterable[object] = ()) -> asyncio.Future[Outcome]:
        """Event-loop thread; never blocks it. :meth:`Dispatcher.asubmit
        <kdispatch.Dispatcher.asubmit>`: the call is submitted now (bad input
        and a closed dispatcher raise here, as from :meth:`submit`; outside a running loop
        :class:`~kdispatch.NoEventLoopError`, and nothing is submitted); the
        result is an ``asyncio.Future`` on the running loop, settled from the reader thread.
        Cancelling it does not withdraw the call (use :meth:`cancel`). ``after``: refused
        (:class:`~kdispatch.GroupsNotSupported`)."""
        _refuse_after(after)
        loop = running_loop("asubmit()")
        return wrap_call_future(self.submit(call), loop)

    def group(self, owner: object, *, kind: str | None = None, gang: int | None = None) -> NoReturn:
        """Not supported here: raises :class:`~kdispatch.GroupsNotSupported`
        (see the module docstring)."""
        del owner, kind, gang
        raise GroupsNotSupported(
            "ProcessDispatcher does not build call groups: use an in-process Dispatcher"
        )

    def cancel(self, uid: str, call_type: str | None = None) -> None:
        """Any thread; never blocks. Withdraw the object's pending call (of ``call_type``, or
        any); its future resolves ``CallCancelled``."""
        check_uid(uid)
        if call_type is not None:
            self.call_types.spec(call_type)
        self._check_open()
        self._resolve_waiting(
            self._window.withdraw(uid, call_type),
            lambda t: CallCancelled(f"cancelled by caller: uid {uid}", uid=uid, call_type=t),
        )
        self._send(dumps((CANCEL, uid, call_type)))

    def revoke(self, error: DispatcherClosed) -> None:
        """Any thread; never blocks. :meth:`Dispatcher.revoke`: ``submit`` raises ``error``
        from now on and the child resolves every call not yet sent with it."""
        if not isinstance(error, DispatcherClosed):
            raise InvalidInputError("revoke needs a DispatcherClosed (e.g. LeadershipLost)")
        with self._state_lock:
            if self._revoked is not None:
                return
            self._revoked = error
        self._resolve_waiting(self._window.withdraw_all(), lambda _: copy.copy(error))
        with contextlib.suppress(DispatcherClosed):
            self._send(dumps((REVOKE, error)))

    @property
    def revoked(self) -> DispatcherClosed | None:
        """The error :meth:`revoke` was called with, or None."""
        return self._revoked

    @property
    def send_deadline(self) -> float | None:
        """Any thread. The send deadline the child reads (``time.monotonic`` seconds; 0.0 while
        the leader does not lead), or None without ``leader``."""
        return self._send_until.value if self._send_until is not None else None

    def _store_send_deadline(self, deadline: float) -> None:
        """The leader's thread, under its lock: one store into shared memory."""
        assert self._send_until is not None
        self._send_until.value = float(deadline)

    def view(self, uid: str, timeout: float = 5.0) -> Obj | None:
        """Caller thread (blocks for one round trip to the child). :meth:`Dispatcher.view`:
        the object with its in-flight and pending mutations applied, or None if untracked.
        Raises :class:`DispatcherClosed` when the child is not running, ``TimeoutError``."""
        check_uid(uid)
        return cast("Obj | None", self._query("view", uid, timeout))

    def aview(self, uid: str, timeout: float | None = 5.0) -> Coroutine[Any, Any, Obj | None]:
        """``await dispatcher.aview(uid)``: :meth:`view` for asyncio code; the child's answer
        is posted to the awaiting loop by the reader thread, so the loop is never blocked and
        no thread waits. Bad input raises when ``aview`` is called; once awaited,
        :class:`DispatcherClosed` when the child is not running, :class:`TimeoutError` after
        ``timeout`` seconds (a later answer is dropped); None if the object is not tracked."""
        check_uid(uid)
        seconds = check_timeout(timeout)
        return self._aview(uid, seconds)

    async def _aview(self, uid: str, timeout: float | None) -> Obj | None:
        """Event-loop thread."""
        qid, future = self._ask("view", uid)
        try:
            return cast("Obj | None", await await_future(future, timeout))
        finally:
            self._queries.pop(qid, None)

    def freeze_gc(self) -> None:
        """Caller thread (one round trip). :meth:`Dispatcher.freeze_gc` in the child, and the
        same freeze in the caller's process."""
        self._query("freeze_gc", None, 30.0)
        self._gc.freeze()

    # ------------------------------------------------------------------ informer callbacks

    def on_add(self, obj: object, kind: str | None = None) -> None:
        """Informer thread; never blocks on the child. The object goes to its actor."""
        self._observe(obj, kind, deleted=False)

    def on_update(self, obj: object, kind: str | None = None) -> None:
        """Informer thread; never blocks on the child."""
        self._observe(obj, kind, deleted=False)

    def on_delete(self, obj: object, kind: str | None = None) -> None:
        """Informer thread; never blocks on the child. Cancels the object's pending calls
        and tombstones its UID (in the child)."""
        self._observe(obj, kind, deleted=True)

    def _observe(self, obj: object, kind: str | None, *, deleted: bool) -> None:
        plain = as_object(obj)
        uid = ObjectRef.of(plain, kind).uid  # bad objects raise here, on the caller's thread
        if self._closing or self._gone is not None:
            return  # nothing left to feed: every call has resolved or will
        if deleted:
            self._resolve_waiting(
                self._window.withdraw(uid),
                lambda t: CallCancelled(f"object deleted: uid {uid}", uid=uid, call_type=t),
            )
        with contextlib.suppress(DispatcherClosed):
            self._send(dumps((OBSERVE, plain, kind, deleted)))

    # ------------------------------------------------------------------ introspection

    @property
    def outstanding(self) -> int:
        """Futures not yet resolved (counted in this process)."""
        return len(self._calls)

    @property
    def backlog(self) -> int:
        """Any thread; cheap. Calls submitted and not resolved, in the child or waiting here,
        Events (best-effort calls) left out (see :attr:`DispatcherLike.backlog`)."""
        return self._backlog.count(lane_level(self.call_types, None))

    def backlog_at(self, call_type: str | None = None) -> int:
        """Any thread; cheap. Calls not resolved (in the child or waiting here) in
        ``call_type``'s lane and the lanes above it (see :meth:`DispatcherLike.backlog_at`)."""
        return self._backlog.count(lane_level(self.call_types, call_type))

    def wait_backlog(
        self, below: int, timeout: float | None = None, *, call_type: str | None = None
    ) -> bool:
        """Calling thread (never the reader's). Block until :meth:`backlog_at`
        ``(call_type)`` is below ``below``, woken by the reader thread as results arrive;
        False after ``timeout`` seconds. See :meth:`DispatcherLike.wait_backlog`."""
        return self._backlog.wait(below, timeout, lane_level(self.call_types, call_type))

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
        """Caller thread (one round trip while the child runs; while it stops, the previous
        answer; after ``stop``, the child's last figures). The child's
        :meth:`Dispatcher.stats <kdispatch.Dispatcher.stats>`, with the same
        keys, documented there; ``pid`` is the child's process id."""
        if self._final is not None:
            out = dict(self._final[1])
        elif self._closing and self._last_stats is not None:
            out = dict(self._last_stats)  # stopping: the child answers no more queries
        else:
            out = dict(cast("dict[str, Any]", self._query("stats", None, 10.0)))
            self._last_stats = out
        out["pid"] = self.pid
        return out

    @property
    def tokens_taken(self) -> int:
        """Rate-limiter tokens used so far (one round trip)."""
        return int(self.stats()["tokens_taken"])

    # ------------------------------------------------------------------ internals

    def _check_open(self) -> None:
        if self._revoked is not None:
            raise copy.copy(self._revoked)  # a fresh exception (traceback) per caller
        if self._gone is not None:
            raise copy.copy(self._gone)
        if self._closing or not self._started:
            raise DispatcherClosed(
                "dispatcher is stopped" if self._closing else "dispatcher not started"
            )

    def _send(self, data: bytes) -> None:
        """Any thread; never blocks. Queue one pickled message for the writer thread;
        DispatcherClosed if the child is gone or was never started."""
        if self._requests is None:
            raise DispatcherClosed("dispatcher not started")
        if self._gone is not None:
            raise copy.copy(self._gone)
        self._outbox.put(data)

    def _write(self) -> None:
        """Writer thread: send whatever is queued in one pipe write (the child unpickles the
        concatenated messages in order), until the ``None`` that :meth:`stop` queues. Only this
        thread writes to the pipe, so a child that reads slowly never blocks a caller."""
        conn = self._requests
        assert conn is not None
        more = True
        while more:
            item = self._outbox.get()
            batch: list[bytes] = []
            size = 0
            while item is not None:
                batch.append(item)
                size += len(item)
                if size >= _MAX_WRITE:
                    break
                try:
                    item = self._outbox.get_nowait()
                except queue.Empty:
                    break
            more = item is not None
            if not batch:
                continue
            try:
                conn.send_bytes(b"".join(batch) if len(batch) > 1 else batch[0])
            except (OSError, ValueError):  # the child is gone: the reader fails what is left
                return

    def _query(self, name: str, arg: Any, timeout: float) -> Any:
        """Caller thread: ask the child and wait up to ``timeout`` for the answer."""
        qid, future = self._ask(name, arg)
        try:
            return future.result(timeout)
        finally:
            self._queries.pop(qid, None)

    def _ask(self, name: str, arg: Any) -> tuple[int, Future[Any]]:
        """Any thread: send a query; its id and the future the reader resolves. The caller
        pops the id when it stops waiting (so a late answer is dropped)."""
        self._check_open()
        qid = next(self._ids)
        future: Future[Any] = Future()
        self._queries[qid] = future
        try:
            self._send(dumps((QUERY, qid, name, arg)))
        except DispatcherClosed:
            self._queries.pop(qid, None)
            raise
        if self._gone is not None and self._queries.pop(qid, None) is not None:
            raise copy.copy(self._gone)
        return qid, future

    def _read(self) -> None:
        """Reader thread: resolve futures from the child's results until its pipe closes,
        then fail whatever is left (exactly once: whoever pops a future resolves it)."""
        results = self._results
        assert results is not None
        while True:
            try:
                batch = cast("list[Result]", pickle.loads(results.recv_bytes()))
            except (EOFError, OSError):
                break
            except Exception:  # a reply that does not unpickle
                logger.opt(exception=True).error("dispatcher process: unreadable results")
                continue
            self._window.resolved(*(r[0] for r in batch))  # room for the next waiting calls
            for fid, ok, value in batch:
                if fid == STOPPED:
                    self._final = value
                    continue
                call = self._calls.pop(fid, None)
                if call is not None:
                    self._settled(call)
                future = call or self._queries.pop(fid, None)
                if future is None:
                    continue
                if ok:
                    future.set_result(value)
                else:
                    future.set_exception(_restored(value))
            self._backlog_changed()
        self._fail_all(self._exit_error())

    def _exit_error(self) -> DispatcherClosed:
        if self._final is not None or self._closing:
            return DispatcherClosed("dispatcher process stopped")
        proc = self._proc
        code = None
        if proc is not None:
            proc.join(1.0)
            code = proc.exitcode
        return DispatcherProcessDied(f"dispatcher process exited unexpectedly (exit code {code})")

    def _resolve_waiting(
        self, fids: list[tuple[int, str]], error: Callable[[str], BaseException]
    ) -> None:
        """Any thread: resolve calls taken out of the window with ``error(call_type)``
        (whoever pops a future resolves it)."""
        for fid, call_type in fids:
            future = self._calls.pop(fid, None)
            if future is not None:
                self._settled(future)
                future.set_exception(error(call_type))
        self._backlog_changed()

    def _fail_all(self, error: DispatcherClosed) -> None:
        self._window.close()  # nothing more goes out; the waiting calls fail below
        if self._gone is None:
            self._gone = error
        error = self._gone
        for fid in list(self._calls):
            call = self._calls.pop(fid, None)
            if call is not None:
                self._settled(call)
                call.set_exception(copy.copy(error))
        for fid in list(self._queries):
            query = self._queries.pop(fid, None)
            if query is not None:
                query.set_exception(copy.copy(error))
        self._backlog_changed()

    @staticmethod
    def _settled(future: CallFuture) -> None:
        """Any thread, right after popping ``future`` from ``_calls`` (so once): it leaves
        the backlog of its lane."""
        future.lane.pop()  # type: ignore[union-attr]  # set by submit before it is registered

    def _backlog_changed(self) -> None:
        """Any thread, after resolving futures: wake the threads in :meth:`wait_backlog`."""
        if self._backlog.waiters:
            self._backlog.wake()


def _refuse_after(after: object) -> None:
    """``after=`` is refused by a dispatcher in another process (any thread)."""
    if after is not None and not (isinstance(after, tuple | list) and not after):
        raise GroupsNotSupported(
            "ProcessDispatcher does not hold calls on prerequisites (after=): chain the "
            "futures in the caller, or use an in-process Dispatcher"
        )


def _check_max_in_flight(value: object) -> None:
    """``value`` is a positive int or None; InvalidConfigError otherwise."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise InvalidConfigError(f"max_in_flight must be a positive int or None, got {value!r}")


def _best_effort_room(config: DispatcherConfig, max_in_flight: int | None) -> int | None:
    """Best-effort calls (Events) in flight to the child, at most: twice what its executor
    sends at once (a quarter of its workers), so the next one is always there while they do
    not hold the window's room through a burst of other calls (None without a window)."""
    if max_in_flight is None:
        return None
    return min(max_in_flight, 2 * max(1, config.executor.workers // 4))


def _check_leader(leader: object) -> None:
    """``leader`` is None or offers the deadlines on ``time.monotonic``; InvalidConfigError
    otherwise."""
    if leader is None:
        return
    if not callable(getattr(leader, "watch_send_deadline", None)):
        raise InvalidConfigError("leader must offer watch_send_deadline (e.g. a LeaseElector)")
    if getattr(leader, "clock", None) is not time.monotonic:
        raise InvalidConfigError(
            "leader must measure its deadlines on time.monotonic: the child process compares "
            "them with its own CLOCK_MONOTONIC"
        )


def _restored(value: object) -> BaseException:
    """An exception as it came out of the pipe, with ``CallFailed.cause`` chained again."""
    if not isinstance(value, BaseException):
        return CallFailed(f"unexpected result from the dispatcher process: {value!r}")
    if isinstance(value, CallFailed) and value.cause is not None:
        value.__cause__ = value.cause
    return value


__all__ = ["CONTEXTS", "DispatcherProcessDied", "ProcessDispatcher", "SendDeadlines"]
