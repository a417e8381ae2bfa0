"""Order statistics of the peer benchmark's per-pod and per-gang figures. Pure functions."""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-quantile (0..1, nearest rank), or None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))]


def rounded(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def p50_p99(values: Sequence[float]) -> dict[str, float | None]:
    """``{"p50": ..., "p99": ...}`` of the values, in milliseconds' precision (None when
    empty)."""
    return {"p50": rounded(percentile(values, 0.5)), "p99": rounded(percentile(values, 0.99))}
