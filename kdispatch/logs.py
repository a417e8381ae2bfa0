"""The library's logs: loguru, under the one name ``kdispatch``, off until switched on
(``from loguru import logger; logger.enable("kdispatch")``), or handed to the standard
:mod:`logging` module by :func:`to_stdlib` (docs: "Metrics and logs").
"""

from __future__ import annotations

import logging

from loguru import logger

from .actors.model.errors import InvalidInputError

NAME = "kdispatch"
"""The one loguru name of the library (every module logs under it)."""


class _Propagate(logging.Handler):
    """loguru sink: hand the record loguru built to the stdlib logger of its module. Runs on
    the thread that logged."""

    def emit(self, record: logging.LogRecord) -> None:
        target = logging.getLogger(record.name)
        if not target.isEnabledFor(record.levelno):
            return
        extra = getattr(record, "extra", None)
        if isinstance(extra, dict):
            for key, value in extra.items():
                if not hasattr(record, key):
                    setattr(record, key, value)
        target.handle(record)


def to_stdlib(level: int | str = "DEBUG") -> int:
    """Any thread. Enable the ``kdispatch`` logs and forward those at ``level`` or above
    (a loguru level name or number) to the standard ``logging`` logger named after the module
    that wrote them (a child of ``kdispatch``), whose levels and handlers then apply. Bound
    fields arrive in ``record.extra`` and, where they do not clash, as attributes
    (``%(uid)s``). Returns the loguru sink id: ``logger.remove(sink_id)`` stops the
    forwarding. Raises :class:`~kdispatch.InvalidInputError` for an unknown level."""
    if isinstance(level, bool) or not isinstance(level, int | str):
        raise InvalidInputError(f"level must be a loguru level name or number, got {level!r}")
    try:
        sink_id = logger.add(_Propagate(), level=level, format="{message}", filter=NAME)
    except ValueError as exc:  # loguru: unknown level name, negative number
        raise InvalidInputError(f"invalid level {level!r}: {exc}") from None
    logger.enable(NAME)
    return sink_id


__all__ = ["NAME", "to_stdlib"]
