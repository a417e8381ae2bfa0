"""``async_test``: an ``async def`` test run as a plain test, on a fresh event loop of its own
(``asyncio.run``: the loop's async generators and default executor are shut down before the
leak check looks). The test extra brings no asyncio plugin for pytest: one that warns about its
own settings would warn in every project of the environment it is installed in."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec

P = ParamSpec("P")


def async_test(test: Callable[P, Coroutine[Any, Any, None]]) -> Callable[P, None]:
    """Decorate an ``async def test_...``: pytest sees a plain test with the same fixtures."""

    @functools.wraps(test)
    def run(*args: P.args, **kwargs: P.kwargs) -> None:
        asyncio.run(test(*args, **kwargs))

    return run
