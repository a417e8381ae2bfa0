"""The parent's end of the pipes to a :class:`~kdispatch.ProcessDispatcher`'s child
(:class:`ChildLink`): one writer thread sends whatever is queued in one pipe write, so a slow
child never blocks a caller; one reader thread resolves the futures from the child's results
(:mod:`.process_child` has the wire) and fails what is left when the pipe closes. Whoever pops
a future from ``_calls`` or ``_queries`` resolves it, so each resolves exactly once.
"""

from __future__ import annotations

import contextlib
import itertools
import pickle
import queue
import time
from collections.abc import Callable
from concurrent.futures import Future
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any, cast

from loguru import logger

from kdispatch.actors.engine.messages import CallFuture, settle
from kdispatch.actors.facade.dispatcher_like import Backlog, DispatcherBase, fresh
from kdispatch.actors.model.errors import CallFailed, DispatcherClosed, Outcome

from .process_child import QUERY, READY, STOPPED, Result, RevokedStandIn, encode, load_result
from .process_window import SendWindow


class DispatcherProcessDied(DispatcherClosed):
    """The dispatcher's child process exited without being asked to (killed, crashed, out of
    memory). Every call pending at that moment fails with it, and ``submit`` raises it."""


class ChildLink(DispatcherBase):
    """Pipes, writer and reader threads, and the futures awaiting the child's answers: the base
    of ``ProcessDispatcher``, which sets it up. Every method says which thread it runs on."""

    _window: SendWindow  # set by the dispatcher: its send window

    def __init__(self, start_timeout: float) -> None:
        """Caller thread; nothing runs until ``start`` sets the process and the pipes."""
        self._start_timeout = start_timeout
        self._ids = itertools.count()
        self._calls: dict[int, CallFuture] = {}
        # _calls counted per lane: whoever pops a future from _calls pops its lane (_pop_call)
        self._backlog = Backlog()
        self._queries: dict[int, Future[Any]] = {}
        self._outbox: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._gone: DispatcherClosed | None = None
        self._ending = False  # stop() ends the child now (joins it, kills it if it must)
        self._final: tuple[bool, dict[str, Any]] | None = None
        self._proc: BaseProcess | None = None
        self._requests: Connection | None = None
        self._results: Connection | None = None

    def _await_ready(self, results: Connection) -> Result:
        """Caller thread (``start``): the child's READY result, or a failed one."""
        try:
            if _poll(results, self._start_timeout):
                batch = cast("list[Result]", pickle.loads(results.recv_bytes()))
                if batch and batch[0][0] == READY:
                    return (READY, *load_result(batch[0][1], batch[0][2]))
        except (EOFError, OSError):
            pass
        code = self._proc.exitcode if self._proc is not None else None
        return (READY, False, DispatcherProcessDied(f"dispatcher process did not start ({code})"))

    def _end_child(self, *, timeout: float) -> None:
        """Caller thread: join the child (kill it after ``timeout``), close the pipes."""
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

    def _check_open(self) -> None:
        """Any thread: raise what a submit meets once the dispatcher is not open: the revoking
        error first, else what :meth:`_check_running` raises."""
        if self._revoked is not None:
            raise self._closed_error()
        self._check_running()

    def _check_running(self) -> None:
        """Any thread: raise what a query meets once the child is not running (not started,
        stopped or gone). A revoked dispatcher's child still answers, as a revoked
        :class:`~kdispatch.Dispatcher` does."""
        if self._gone is not None:
            raise fresh(self._gone)  # a fresh exception (traceback) per caller
        if self._closed or not self._started:
            raise self._closed_error()

    def _send(self, data: bytes) -> None:
        """Any thread; never blocks. Queue one pickled message for the writer thread;
        DispatcherClosed if the child is gone or was never started."""
        if self._requests is None:
            raise DispatcherClosed("dispatcher not started")
        if self._gone is not None:
            raise fresh(self._gone)
        self._outbox.put(data)

    def _query(self, name: str, arg: Any, timeout: float | None) -> Any:
        """Caller thread: ask the child and wait up to ``timeout`` (None: no limit) for the
        answer."""
        qid, future = self._ask(name, arg)
        try:
            return future.result(timeout)
        finally:
            self._queries.pop(qid, None)

    def _ask(self, name: str, arg: Any) -> tuple[int, Future[Any]]:
        """Any thread: send a query; its id and the future the reader resolves. The caller
        pops the id when it stops waiting (so a late answer is dropped)."""
        self._check_running()
        qid = next(self._ids)
        future: Future[Any] = Future()
        self._queries[qid] = future
        try:
            self._send(encode((QUERY, qid, name, arg), qid))
        except DispatcherClosed:
            self._queries.pop(qid, None)
            raise
        if self._gone is not None and self._queries.pop(qid, None) is not None:
            raise fresh(self._gone)
        return qid, future

    def _read(self) -> None:
        """Reader thread: resolve futures from the child's results until its pipe closes,
        then fail whatever is left (exactly once: whoever pops a future resolves it). Each
        value loads on its own: one that does not fails only its own future."""
        results = self._results
        assert results is not None
        while True:
            try:
                batch = cast("list[Result]", pickle.loads(results.recv_bytes()))
            except (EOFError, OSError):
                break
            except Exception:  # ids, flags, Outcomes and bytes only: never expected
                logger.opt(exception=True).error("dispatcher process: unreadable results")
                continue
            self._window.resolved(*(r[0] for r in batch))  # room for the next waiting calls
            for fid, sent_ok, sent in batch:
                if fid == STOPPED:
                    self._final = _final_figures(*load_result(sent_ok, sent))
                    continue
                future = self._pop_call(fid) or self._queries.pop(fid, None)
                if future is None:
                    continue
                ok, value = load_result(sent_ok, sent)
                if ok:
                    future.set_result(value)
                elif isinstance(value, RevokedStandIn) and self._revoked is not None:
                    future.set_exception(fresh(self._revoked))  # the caller's own error
                else:
                    future.set_exception(_restored(value))
            self._backlog_changed()
        self._fail_all(self._exit_error())

    def _exit_error(self) -> DispatcherClosed:
        """Reader thread: what the futures left when the pipe closed fail with:
        :class:`DispatcherClosed` once the child reported its stop (or ``stop`` ended it at
        its deadline), else :class:`DispatcherProcessDied`, during a ``stop`` too."""
        if self._final is not None or self._ending:
            return DispatcherClosed("dispatcher process stopped")
        proc = self._proc
        code = None
        if proc is not None:
            with contextlib.suppress(ValueError):  # closed by stop() meanwhile
                proc.join(1.0)
                code = proc.exitcode
        return DispatcherProcessDied(f"dispatcher process exited unexpectedly (exit code {code})")

    def _resolve_waiting(
        self, fids: list[tuple[int, str]], outcome: Callable[[str], Outcome | BaseException]
    ) -> None:
        """Any thread: resolve calls taken out of the window with ``outcome(call_type)``, an
        outcome or an error (whoever pops a future resolves it)."""
        for fid, call_type in fids:
            future = self._pop_call(fid)
            if future is not None:
                settle(future, outcome(call_type))
        self._backlog_changed()

    def _fail_all(self, error: DispatcherClosed) -> None:
        """Any thread: the child is gone; fail every future left (the first error stays)."""
        self._window.abandon()  # nothing more goes out or answers; the calls fail below
        if self._gone is None:
            self._gone = error
        error = self._gone
        for fid in list(self._calls):
            call = self._pop_call(fid)
            if call is not None:
                call.set_exception(fresh(error))
        for fid in list(self._queries):
            query = self._queries.pop(fid, None)
            if query is not None:
                query.set_exception(fresh(error))
        self._backlog_changed()

    def _pop_call(self, fid: int) -> CallFuture | None:
        """Any thread: take call ``fid`` out of ``_calls`` and its lane's backlog; whoever gets
        it (once) resolves it."""
        future = self._calls.pop(fid, None)
        if future is not None:
            future.lane.pop()  # type: ignore[union-attr]  # set by submit before it is registered
        return future

    def _backlog_changed(self) -> None:
        """Any thread, after resolving futures: wake the threads in :meth:`wait_backlog`."""
        if self._backlog.waiters:
            self._backlog.wake()


_MAX_POLL = 86_400.0
"""The longest single ``Connection.poll`` (it takes at most about 24 days)."""


def _poll(conn: Connection, timeout: float) -> bool:
    """Caller thread: ``conn.poll(timeout)`` for any finite ``timeout``, in slices it takes."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if conn.poll(max(0.0, min(left, _MAX_POLL))):
            return True
        if left <= _MAX_POLL:
            return False


def _final_figures(ok: bool, value: Any) -> tuple[bool, dict[str, Any]]:
    """Reader thread: the child's :data:`STOPPED` value, ``(drained, stats)``."""
    if ok:
        return cast("tuple[bool, dict[str, Any]]", value)
    logger.error("dispatcher process: its final figures do not load: {}", value)
    return False, {}


def _restored(value: object) -> BaseException:
    """An exception as it came out of the pipe, with ``CallFailed.cause`` chained again."""
    if not isinstance(value, BaseException):
        return CallFailed(f"unexpected result from the dispatcher process: {value!r}")
    if isinstance(value, CallFailed) and value.cause is not None:
        value.__cause__ = value.cause
    return value
