"""asyncio bridges: a call's future and an object's view, awaited on the caller's event loop
without blocking it or spending a thread (docs/asyncio.md). Cancelling the awaiting task never
withdraws the call: its ``CallFuture`` resolves exactly once whatever the awaiting side does.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
from typing import Any, Final, TypeVar

from kdispatch.actors.model.errors import KdispatchError, Outcome

from .messages import CallFuture

_T = TypeVar("_T")

ASYNC_SOURCE: Final = "_kdispatch_source"
"""Attribute of an asyncio future returned by ``asubmit``: the call's :class:`CallFuture`
(so the asyncio future may be given as a prerequisite)."""


class NoEventLoopError(KdispatchError, RuntimeError):
    """An asyncio method that starts work at once (a dispatcher's or a call group's
    ``asubmit``, a call group's ``apreempt``, ``AioInformer.start``) was called outside a
    running event loop: call it from a coroutine, or use the threaded ``submit`` (or
    ``Informer``). (``aview`` returns a coroutine: it needs a loop only to be awaited.)"""


def running_loop(what: str) -> asyncio.AbstractEventLoop:
    """The running loop of the calling thread, or :class:`NoEventLoopError`. Loop thread."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        raise NoEventLoopError(
            f"{what} must be called from a coroutine on a running event loop"
        ) from None


def wrap_call_future(
    future: CallFuture, loop: asyncio.AbstractEventLoop
) -> asyncio.Future[Outcome]:
    """An asyncio future on ``loop`` that settles when ``future`` does, tagged with it
    (:data:`ASYNC_SOURCE`); cancelling it leaves ``future`` untouched. Loop thread."""
    wrapped = asyncio.wrap_future(future, loop=loop)
    setattr(wrapped, ASYNC_SOURCE, future)
    return wrapped


def _settle(target: asyncio.Future[Any], value: Any, exc: BaseException | None) -> None:
    """Loop thread. A target that timed out or was cancelled meanwhile stays as it is."""
    if target.done():
        return
    if exc is not None:
        target.set_exception(exc)
    else:
        target.set_result(value)


async def await_future(future: concurrent.futures.Future[_T], timeout: float | None) -> _T:
    """Loop thread. ``future``'s result (or exception), posted to the loop with one
    ``call_soon_threadsafe`` by whichever thread resolves it. :class:`TimeoutError` after
    ``timeout`` seconds (a loop timer); ``future`` is never cancelled, and a completion
    arriving later is dropped."""
    loop = asyncio.get_running_loop()
    target: asyncio.Future[_T] = loop.create_future()

    def relay(done: concurrent.futures.Future[_T]) -> None:
        """The thread that resolved ``future``."""
        value: Any = None
        exc: BaseException | None = None
        try:
            value = done.result()
        except BaseException as err:  # its exception (or CancelledError) goes to the loop
            exc = err
        with contextlib.suppress(RuntimeError):  # the loop was closed: nobody waits any more
            loop.call_soon_threadsafe(_settle, target, value, exc)

    future.add_done_callback(relay)
    timer = None if timeout is None else loop.call_later(timeout, _expire, target, timeout)
    try:
        return await target
    finally:
        if timer is not None:
            timer.cancel()


def _expire(target: asyncio.Future[Any], timeout: float) -> None:
    """Loop thread: the deadline passed."""
    if not target.done():
        target.set_exception(TimeoutError(f"no answer within {timeout} s"))
