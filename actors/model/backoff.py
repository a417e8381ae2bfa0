"""Capped exponential backoff with jitter: the one formula behind every retry delay (the
executor's retries and the informers' reconnects; client-go's ``wait.Backoff``, ``Factor=2``).
Pure: the caller draws the random number.
"""

from __future__ import annotations

from .errors import InvalidInputError

__all__ = ["backoff_delay"]

_MAX_DOUBLINGS = 62  # 2**62 times any positive initial is beyond every cap


def backoff_delay(
    failures: int, *, initial: float, cap: float, jitter: float, rand: float
) -> float:
    """Seconds to wait after the ``failures``-th consecutive failure (1 for the first).

    ``min(cap, initial * 2**(failures - 1)) * (1 + jitter * rand)``, with ``rand`` a draw from
    ``[0, 1)`` of the caller's random source. ``failures`` below 1 counts as 1. Raises
    :class:`InvalidInputError` for a negative ``initial``, ``cap`` or ``jitter``, or ``rand``
    outside ``[0, 1)``. Pure; any thread.
    """
    if initial < 0 or cap < 0 or jitter < 0:
        raise InvalidInputError("initial, cap and jitter must not be negative")
    if not 0.0 <= rand < 1.0:
        raise InvalidInputError(f"rand must be in [0, 1), got {rand!r}")
    doublings = min(max(0, failures - 1), _MAX_DOUBLINGS)
    return min(cap, initial * 2.0**doublings) * (1.0 + jitter * rand)
