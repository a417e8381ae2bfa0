"""The child side of :class:`~kdispatch.ProcessDispatcher`: a real
:class:`~kdispatch.Dispatcher` in its own interpreter, driven over two pipes.

Parent → child: pickled tuples (:data:`SUBMIT`, ...), several per write, each framed by
:func:`encode` with its length and its call or query id, so each is loaded on its own: one the
child cannot load fails only its own future (:class:`CallFailed` naming why) and the rest of the
write is carried out. The main thread hands them on (queries go to a small pool, never holding
up intake). Child → parent: lists of ``(id, ok, value)`` results, coalesced by one writer
thread; a value other than an :class:`Outcome` crosses as a pickle of its own
(:func:`load_result`), so one the parent cannot load fails only its own future. An exception
is checked to load again before it is sent, and replaced by a typed stand-in if it does not
(:func:`portable`). The child ignores SIGINT and stops without draining when the parent goes
away.
"""

from __future__ import annotations

import contextlib
import copyreg
import io
import os
import pickle
import queue
import signal
import struct
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from ctypes import c_double
from multiprocessing.connection import Connection
from types import MappingProxyType
from typing import Any, Final, TypeVar

from loguru import logger
from prometheus_client import CollectorRegistry

from kdispatch.actors.facade.dispatcher import Dispatcher
from kdispatch.actors.model.backend import ApiBackend
from kdispatch.actors.model.calls import CallTypeRegistry
from kdispatch.actors.model.config import DispatcherConfig
from kdispatch.actors.model.errors import (
    CallFailed,
    CallOutcomeError,
    DispatcherClosed,
    KdispatchError,
    Outcome,
)

PROTOCOL: Final = pickle.HIGHEST_PROTOCOL

# parent → child message tags (first element of the tuple)
SUBMIT: Final = "s"  # (SUBMIT, id, call)
OBSERVE: Final = "o"  # (OBSERVE, obj, kind, deleted: bool)
CANCEL: Final = "c"  # (CANCEL, uid, call_type)
REVOKE: Final = "r"  # (REVOKE, error pickled or None, its description): see revoking_error
QUERY: Final = "q"  # (QUERY, id, name, arg): "view" (uid), "stats", "freeze_gc"
STOP: Final = "x"  # (STOP, drain, timeout: seconds or None)

NO_ID: Final = -1
"""The id in the frame of a message that awaits no answer (:func:`encode`)."""

_FRAME: Final = struct.Struct("<Iq")
"""The header of each parent → child message: its pickle's length, and the id of the call or
query it carries (:data:`NO_ID`: none)."""

_NO_FRAME: Final = bytes(_FRAME.size)

# child → parent control ids (call and query ids are >= 0)
READY: Final = -1  # value: the child's pid, or the exception that stopped its start
STOPPED: Final = -2  # value: (drained, final stats)

_T = TypeVar("_T")

Result = tuple[int, bool, Any]
"""``(id, ok, value)``: ``ok`` False means ``value`` is an exception. On the wire ``value`` is
an :class:`Outcome` or its own pickle (:func:`load_result`)."""

BackendFactory = Callable[[], ApiBackend]

Outbox = queue.SimpleQueue[Result | None]
"""The child's results waiting for its writer thread (:func:`write_batches`)."""


def _proxy(data: dict[Any, Any]) -> MappingProxyType[Any, Any]:
    return MappingProxyType(data)


def _reduce_proxy(proxy: MappingProxyType[Any, Any]) -> tuple[Any, tuple[dict[Any, Any]]]:
    return _proxy, (dict(proxy),)


_DISPATCH: dict[type, Any] = {**copyreg.dispatch_table, MappingProxyType: _reduce_proxy}
"""Pickle reducers of the wire: calls keep their conditions in read-only ``MappingProxyType``
views, which plain pickle refuses; they cross as dicts and are wrapped again."""


def dumps(obj: object) -> bytes:
    """``obj`` pickled for the wire (highest protocol, read-only mappings included). Any
    thread; raises what pickle raises."""
    buf = io.BytesIO()
    pickler = pickle.Pickler(buf, PROTOCOL)
    pickler.dispatch_table = _DISPATCH
    pickler.dump(obj)
    return buf.getvalue()


def encode(msg: tuple[Any, ...], mid: int = NO_ID) -> bytes:
    """A parent → child message: ``msg`` pickled (:func:`dumps`) behind a frame holding its
    length and ``mid``, the id of the call or query it carries, so the child can load it on its
    own and answer ``mid`` if it cannot. Any thread; raises what pickle raises."""
    buf = io.BytesIO()
    buf.write(_NO_FRAME)
    pickler = pickle.Pickler(buf, PROTOCOL)
    pickler.dispatch_table = _DISPATCH
    pickler.dump(msg)
    with buf.getbuffer() as view:
        _FRAME.pack_into(view, 0, len(view) - _FRAME.size, mid)
    return buf.getvalue()


def load_result(ok: bool, value: Any) -> tuple[bool, Any]:
    """A result's ``(ok, value)`` as sent by the child's writer (an :class:`Outcome`, or the
    pickle of the value), loaded; ``(False, CallFailed)`` naming why if it does not load. The
    parent's reader thread."""
    if isinstance(value, Outcome):
        return ok, value
    try:
        return ok, pickle.loads(value)
    except Exception as err:  # a class this process cannot load, a constructor that fails
        return False, CallFailed(
            f"a result of the dispatcher process does not unpickle here: {type(err).__name__}: "
            f"{err}"
        )


def portable(exc: BaseException) -> BaseException:
    """``exc`` if it survives a pickle round trip, else a typed stand-in: the same
    :class:`CallOutcomeError` with an unpicklable ``cause`` replaced by a
    :class:`CallFailed` describing it, or a :class:`CallFailed` naming the original. Pure."""
    try:
        pickle.loads(dumps(exc))
        return exc
    except Exception:  # any pickling failure means: substitute
        return _stand_in(exc)


def _stand_in(exc: BaseException) -> BaseException:
    """:func:`portable`'s typed stand-in for ``exc``, which does not survive a round trip."""
    described = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, CallFailed) and exc.cause is not None:
        cause = CallFailed(f"{type(exc.cause).__name__}: {exc.cause}")
        stand_in = CallFailed(
            str(exc), uid=exc.uid, call_type=exc.call_type, cause=cause, ref=exc.ref
        )
        with contextlib.suppress(Exception):
            pickle.loads(dumps(stand_in))
            return stand_in
    if isinstance(exc, CallOutcomeError):
        return CallFailed(described, uid=exc.uid, call_type=exc.call_type, ref=exc.ref)
    return CallFailed(described)


class RevokedStandIn(DispatcherClosed):
    """The child's revoking error when the caller's does not load there (it does not pickle,
    does not unpickle, or its class is the caller's only): the caller's reader resolves a
    future failed with it with the caller's own error (:func:`revoking_error`)."""


def revoking_error(data: bytes | None, described: str) -> DispatcherClosed:
    """Main thread of the child: the error a :data:`REVOKE` carries (``data``: its pickle, None
    if it did not pickle), or a :class:`RevokedStandIn` named ``described`` if it does not load
    as a :class:`DispatcherClosed`, so the child revokes whatever the error."""
    if data is not None:
        with contextlib.suppress(Exception):  # a class the child lacks, a failing constructor
            error = pickle.loads(data)
            if isinstance(error, DispatcherClosed):
                return error
    return RevokedStandIn(described)


class SharedDeadline:
    """A send gate read from shared memory: open while ``time.monotonic()`` is before the
    deadline the parent stored. One aligned 8-byte read, no lock; fails closed (``0.0``, a
    deadline that passed, NaN)."""

    __slots__ = ("_until",)

    def __init__(self, until: c_double) -> None:
        self._until = until

    def __call__(self) -> bool:
        """Executor worker thread."""
        return time.monotonic() < self._until.value


def write_batches(
    conn: Connection,
    inbox: queue.SimpleQueue[_T | None],
    encode: Callable[[list[_T]], bytes],
    limit: int,
    weigh: Callable[[_T], int] | None = None,
) -> None:
    """A pipe's only writer thread: send whatever is queued in ``inbox`` in one write (the
    ``encode`` of at most ``limit`` items, or of items whose ``weigh`` sums to ``limit``),
    so nobody waits for a slow reader; until the ``None`` that ends the stream, or until the
    reader is gone."""
    while True:
        batch: list[_T] = []
        size = 0
        item = inbox.get()
        while item is not None:
            batch.append(item)
            size += 1 if weigh is None else weigh(item)
            if size >= limit:
                break
            try:
                item = inbox.get_nowait()
            except queue.Empty:
                break
        if batch:
            data = encode(batch)
            try:
                conn.send_bytes(data)
            except (OSError, ValueError):  # the reader is gone: nobody waits for the rest
                return
        if item is None:
            return


def _dump_results(batch: list[Result]) -> bytes:
    """Writer thread: ``batch`` pickled, each value but an :class:`Outcome` in a pickle of its
    own (:func:`load_result`), so the list itself always loads and one value the parent cannot
    load fails only its own future."""
    return dumps([_wire(r) for r in batch])


def _wire(result: Result) -> Result:
    """Writer thread: ``result`` as it crosses. An exception that does not load again here is
    replaced by its typed stand-in (:func:`portable`), a value that does not pickle by a
    :class:`CallFailed` naming why."""
    fid, ok, value = result
    if ok and isinstance(value, Outcome):  # the hot path: a call's outcome, always loadable
        return result
    if not ok:
        return fid, False, _dump_error(value)
    try:
        return fid, True, dumps(value)
    except Exception as err:
        return fid, False, _dump_error(CallFailed(f"result does not pickle: {err}"))


def _dump_error(exc: object) -> bytes:
    """Writer thread: ``exc`` pickled once it loaded again (a round trip), else its stand-in."""
    if not isinstance(exc, BaseException):
        exc = CallFailed(f"unexpected result from the dispatcher process: {exc!r}")
    try:
        data = dumps(exc)
        pickle.loads(data)  # e.g. a constructor with two required arguments fails only here
    except Exception:
        return dumps(_stand_in(exc))
    return data


def _result(fid: int, future: Future[Any]) -> Result:
    """The result of a resolved ``future``, under ``fid``. The resolving thread."""
    exc = future.exception()
    return (fid, False, exc) if exc is not None else (fid, True, future.result())


class _Child:
    """The child's state: the dispatcher, its outbox and the query pool. Main thread."""

    def __init__(self, dispatcher: Dispatcher, outbox: Outbox) -> None:
        self.dispatcher = dispatcher
        self.outbox = outbox
        self.queries = ThreadPoolExecutor(max_workers=2, thread_name_prefix="kdispatch-child-q")

    def handle(self, msg: tuple[Any, ...]) -> bool:
        """Main thread. Carry out one message; False once the parent asked to stop."""
        tag = msg[0]
        if tag == SUBMIT:
            self._submit(msg[1], msg[2])
        elif tag == OBSERVE:
            _, obj, kind, deleted = msg
            if deleted:
                self.dispatcher.on_delete(obj, kind)
            else:
                self.dispatcher.on_update(obj, kind)
        elif tag == CANCEL:
            self.dispatcher.cancel(msg[1], msg[2])
        elif tag == REVOKE:
            self.dispatcher.revoke(revoking_error(msg[1], msg[2]))
        elif tag == QUERY and msg[2] == "view":
            self._view(msg[1], msg[3])
        elif tag == QUERY:
            self.queries.submit(self._query, msg[1], msg[2], msg[3])
        elif tag == STOP:
            self.stop(drain=msg[1], timeout=msg[2])
            return False
        return True

    def _submit(self, fid: int, call: Any) -> None:
        try:
            future = self.dispatcher.submit(call)
        except Exception as err:  # closed, revoked, actor limit, bad input
            self.outbox.put((fid, False, err))  # the writer checks that it crosses
            return
        future.add_done_callback(lambda f: self.outbox.put(_result(fid, f)))

    def _view(self, qid: int, uid: str) -> None:
        """Main thread; never waits. Ask the object's actor for its view: the actor's thread
        sends the answer. No timeout here: the caller's (``view``, ``aview``) is the only
        one, and an answer it stopped waiting for is dropped in the parent."""
        try:
            reply = self.dispatcher._ask_view(uid)
        except Exception as err:  # the parent's future carries it
            self.outbox.put((qid, False, err))
            return
        if reply is None:  # not tracked
            self.outbox.put((qid, True, None))
        else:
            reply.add_done_callback(lambda f: self.outbox.put(_result(qid, f)))

    def _query(self, qid: int, name: str, arg: Any) -> None:
        """Query pool thread: ``stats`` and ``freeze_gc``."""
        del arg
        try:
            if name == "stats":
                value: Any = self.dispatcher.stats()
            elif name == "freeze_gc":
                self.dispatcher.freeze_gc()
                value = None
            else:
                raise KdispatchError(f"unknown query {name!r}")
        except Exception as err:  # the parent's future carries it
            self.outbox.put((qid, False, err))
            return
        self.outbox.put((qid, True, value))

    def unreadable(self, mid: int, err: Exception) -> None:
        """Main thread: a message that did not unpickle here. A call or query fails with a
        :class:`CallFailed` naming why; a message that awaits no answer is logged."""
        why = (
            f"the dispatcher process cannot unpickle the message: {type(err).__name__}: {err} "
            "(its classes must be importable in the child, which is started with spawn)"
        )
        if mid == NO_ID:
            logger.error("dispatcher process: {}", why)
        else:
            self.outbox.put((mid, False, CallFailed(why)))

    def stop(self, *, drain: bool, timeout: float | None) -> None:
        """Main thread. Stop the dispatcher, finish the queries, then send the final figures."""
        drained = self.dispatcher.stop(drain=drain, timeout=timeout)
        self.queries.shutdown(wait=True)
        self.outbox.put((STOPPED, True, (drained, self.dispatcher.stats())))


def child_main(
    requests: Connection,
    results: Connection,
    backend_factory: BackendFactory,
    config: DispatcherConfig,
    call_types: CallTypeRegistry | None,
    *,
    send_until: c_double | None = None,
) -> None:
    """The child's entry point (main thread): build the backend and the dispatcher, report
    :data:`READY`, then serve the parent's messages until :data:`STOP` or the parent goes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    outbox: Outbox = queue.SimpleQueue()
    writer = threading.Thread(
        target=write_batches,
        args=(results, outbox, _dump_results, 1024),
        name="kdispatch-child-out",
        daemon=True,
    )
    writer.start()
    backend: ApiBackend | None = None
    try:
        backend = backend_factory()
        dispatcher = Dispatcher(
            backend,
            config,
            call_types=call_types,
            metrics_registry=CollectorRegistry(),
            send_gate=SharedDeadline(send_until) if send_until is not None else None,
        ).start()
    except Exception as err:  # reported to the parent's start()
        outbox.put((READY, False, err))
    else:
        outbox.put((READY, True, os.getpid()))
        child = _Child(dispatcher, outbox)
        serving = True
        while serving:
            try:
                data = requests.recv_bytes()
            except (EOFError, OSError):  # the parent is gone: stop at once
                child.stop(drain=False, timeout=1.0)
                break
            serving = _handle_all(child, data)
    finally:
        outbox.put(None)  # the writer sends what is queued, then ends
        writer.join()
        _close(backend)
        requests.close()
        results.close()


def _handle_all(child: _Child, data: bytes) -> bool:
    """Main thread. Carry out the messages of one write (framed by :func:`encode`), in order;
    False after :data:`STOP`. Each loads on its own: one that does not fails alone."""
    view = memoryview(data)
    pos = 0
    while pos < len(view):
        size, mid = _FRAME.unpack_from(view, pos)
        pos += _FRAME.size + size
        try:
            msg = pickle.loads(view[pos - size : pos])
        except Exception as err:  # e.g. a class only the parent has
            child.unreadable(mid, err)
            continue
        try:
            if not child.handle(msg):
                return False
        except Exception:  # never let one message end the child
            logger.opt(exception=True).error("dispatcher process: message failed")
    return True


def _close(backend: object) -> None:
    close = getattr(backend, "close", None)
    if callable(close):
        with contextlib.suppress(Exception):
            close()


__all__ = [
    "BackendFactory",
    "Outcome",
    "RevokedStandIn",
    "SharedDeadline",
    "child_main",
    "dumps",
    "portable",
    "revoking_error",
]
