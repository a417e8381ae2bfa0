"""A ``threading.Condition`` created on first use, for objects that almost never wait.

Every object actor's stop flag and every call's future would otherwise build one up front (a
lock, a deque and bound methods: about 1 KiB each) that nobody waits on. Both keep it in a
``_cond`` attribute, None until :func:`condition_of` installs it under :data:`CREATE_LOCK`;
code that must not race with the creation (a future resolving without a condition) holds
that lock too. Any thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol

CREATE_LOCK = threading.Lock()
"""Held while a condition is installed (and by whoever must exclude that): only for a few
attribute reads and writes."""


class HasLazyCondition(Protocol):
    """An object that keeps its condition in ``_cond`` (None until first use)."""

    _cond: threading.Condition | None


def condition_of(
    owner: HasLazyCondition, make: Callable[[], threading.Condition] = threading.Condition
) -> threading.Condition:
    """``owner._cond``, created with ``make()`` on first use (once, whatever the threads).

    ``make()`` runs before :data:`CREATE_LOCK` is taken, so the lock is held only for the check
    and the store (for speed: no thread waits behind a ``Condition`` being built). A thread
    that loses the race drops its condition."""
    cond = owner._cond
    if cond is None:
        fresh = make()
        with CREATE_LOCK:
            cond = owner._cond
            if cond is None:
                cond = owner._cond = fresh
    return cond
