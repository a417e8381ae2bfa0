"""Token bucket (QPS + burst) with an injectable clock. Not thread-safe by itself: the
executor calls it under its own lock. A token taken for nothing is given back
(:meth:`TokenBucket.refund`), so merged and elided calls cost no budget.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from kdispatch.actors.model.config import check_positive


class TokenBucket:
    """``qps`` tokens per second (a number > 0; ``math.inf``: never throttles), at most
    ``burst`` (an int >= 1) stored; anything else raises :class:`~kdispatch.InvalidConfigError`.
    Runs on whichever thread holds the executor's lock."""

    __slots__ = ("_burst", "_clock", "_last", "_qps", "_tokens", "taken", "unlimited")

    def __init__(self, qps: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        check_positive("qps", qps)
        check_positive("burst", burst, integer=True)
        self._qps = float(qps)
        self._burst = float(burst)
        self._clock = clock
        self._tokens = float(burst)
        self._last = clock()
        self.taken = 0
        """Tokens taken and not refunded, since creation."""
        self.unlimited = math.isinf(self._qps)
        """True when the bucket never throttles."""

    def _refill(self) -> None:
        now = self._clock()
        elapsed = now - self._last
        if elapsed > 0:
            self._tokens = min(self._burst, self._tokens + elapsed * self._qps)
        self._last = now

    def try_take(self, n: int = 1) -> float:
        """Take ``n`` tokens at once (one by default; ``n`` <= the burst) if the bucket holds
        them and return 0.0; otherwise take nothing and return the seconds until it will hold
        them."""
        if self.unlimited:
            self.taken += n
            return 0.0
        self._refill()
        if self._tokens >= n:
            self._tokens -= n
            self.taken += n
            return 0.0
        return (n - self._tokens) / self._qps

    @property
    def burst(self) -> int:
        """The most tokens the bucket stores (for an unlimited bucket, a large number)."""
        return 1 << 30 if math.isinf(self._burst) else int(self._burst)

    def refund(self) -> None:
        """Give back a token that was taken but not used."""
        self.taken -= 1
        if not self.unlimited:
            self._tokens = min(self._burst, self._tokens + 1.0)

    def available(self) -> float:
        """Tokens available now (for metrics and tests)."""
        if self.unlimited:
            return math.inf
        self._refill()
        return self._tokens
