"""Waiting for observable state: poll a predicate until it holds or a deadline passes.

For state that no event or future announces (the server's objects, a counter, a process
table). The wait ends as soon as the predicate holds; the interval between two looks is not
synchronisation, only how often to look. :func:`wait_for` raises a :class:`TimeoutError`
naming what it waited for; :func:`poll` returns None instead; :func:`until` is the same wait
for code on an asyncio loop (it yields to the loop between two looks).

Runs on the caller's thread (``until``: on the caller's event loop).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Generic, NamedTuple, TypeVar

__all__ = ["poll", "until", "wait_for"]

T = TypeVar("T")


def poll(predicate: Callable[[], T | None], timeout: float, *, interval: float = 0.01) -> T | None:
    """The first truthy value of ``predicate()`` within ``timeout`` seconds, else None."""
    deadline = time.monotonic() + timeout
    while not (look := _look(predicate, deadline, time.monotonic)).done:
        time.sleep(interval)  # how often to look, not synchronisation
    return look.value


def wait_for(
    predicate: Callable[[], T | None], timeout: float, what: str, *, interval: float = 0.01
) -> T:
    """The first truthy value of ``predicate()``; :class:`TimeoutError` naming ``what`` when
    none comes within ``timeout`` seconds."""
    return _found(poll(predicate, timeout, interval=interval), timeout, what)


async def until(
    predicate: Callable[[], T | None], timeout: float, what: str, *, interval: float = 0.005
) -> T:
    """:func:`wait_for` on an asyncio loop: the loop runs between two looks."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not (look := _look(predicate, deadline, loop.time)).done:
        await asyncio.sleep(interval)
    return _found(look.value, timeout, what)


class _Look(NamedTuple, Generic[T]):
    done: bool
    value: T | None


def _look(
    predicate: Callable[[], T | None], deadline: float, clock: Callable[[], float]
) -> _Look[T]:
    """One look: done with the value when it is truthy, done with None once ``clock()`` passed
    ``deadline``, else not done."""
    value = predicate()
    if value:
        return _Look(True, value)
    return _Look(clock() >= deadline, None)


def _found(value: T | None, timeout: float, what: str) -> T:
    if value is None:
        raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
    return value
