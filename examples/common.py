"""Small helpers shared by the example programs (config checks, verbose logging)."""

from __future__ import annotations

import math
import sys

from loguru import logger

from kdispatch import InvalidInputError


def check_counts(obj: object, *names: str) -> None:
    """Each attribute must be an int >= 1. Raises :class:`InvalidInputError`."""
    for name in names:
        value = getattr(obj, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidInputError(f"{name} must be an int >= 1, got {value!r}")


def check_amounts(obj: object, *names: str) -> None:
    """Each attribute must be a finite number >= 0. Raises :class:`InvalidInputError`."""
    for name in names:
        value = getattr(obj, name)
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise InvalidInputError(f"{name} must be a number >= 0, got {value!r}")
        if not math.isfinite(value):
            raise InvalidInputError(f"{name} must be finite")


def check_rate(name: str, value: float) -> None:
    """A probability: between 0 and 1."""
    if value > 1:
        raise InvalidInputError(f"{name} is a rate between 0 and 1")


def enable_verbose_logs() -> None:
    """Send the library's and the examples' debug logs to stderr (off by default)."""
    logger.remove()
    logger.add(sys.stderr, level="DEBUG")
    for name in ("kdispatch", "examples"):
        logger.enable(name)
