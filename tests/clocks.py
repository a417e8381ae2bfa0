"""A clock tests move by hand: the one fake for every ``clock=`` parameter in the library."""

from __future__ import annotations


class ManualClock:
    """Monotonic seconds that change only when a test sets ``now`` or calls :meth:`advance`."""

    def __init__(self, start: float = 0.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
