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
from typing import TypeVar

__all__ = ["poll", "until", "wait_for"]

T = TypeVar("T")


def poll(predicate: Callable[[], T], timeout: float, *, interval: float = 0.01) -> T | None:
    """The first truthy value of ``predicate()`` within ``timeout`` seconds, else None."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            return None
        time.sleep(interval)  # how often to look, not synchronisation


def wait_for(predicate: Callable[[], T], timeout: float, what: str, *, interval: float = 0.01) -> T:
    """The first truthy value of ``predicate()``; :class:`TimeoutError` naming ``what`` when
    none comes within ``timeout`` seconds."""
    value = poll(predicate, timeout, interval=interval)
    if value is None:
        raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
    return value


async def until(
    predicate: Callable[[], T], timeout: float, what: str, *, interval: float = 0.005
) -> T:
    """:func:`wait_for` on an asyncio loop: the loop runs between two looks."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if loop.time() >= deadline:
            raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
        await asyncio.sleep(interval)
