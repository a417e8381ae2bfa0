"""The library's logs: loguru, under the one name ``kdispatch``, off until switched on.

* The switch: ``from loguru import logger; logger.enable("kdispatch")`` (and
  ``logger.disable("kdispatch")``). ``import kdispatch`` disables it, as a library should.
* The bridge: :func:`to_stdlib` enables the logs and hands every ``kdispatch`` record to the
  standard :mod:`logging` logger named after the module that wrote it (a child of the
  ``kdispatch`` logger, so ``logging.getLogger("kdispatch")`` sets them all), so an
  application that configures ``logging`` (kopf does) sees them with its own handlers, levels
  and formats. It is loguru's documented "propagate to standard logging" recipe: a
  ``logging.Handler`` used as a loguru sink.

Bound fields (``pod``, ``uid``, ``call_type``, ``node``, ``result``, ``attempt``) arrive as
``record.extra`` (a dict) and, where they do not clash with a ``LogRecord`` attribute, as
attributes of their own (``%(uid)s`` in a format string).
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
    (a loguru level name or number) to standard ``logging``; the stdlib loggers' own levels and
    handlers then apply. Returns the loguru sink id: ``logger.remove(sink_id)`` stops the
    forwarding. loguru's default stderr sink, if you kept it, prints them as well:
    ``logger.remove(0)`` when ``logging`` is your only log path."""
    if isinstance(level, bool) or not isinstance(level, int | str):
        raise InvalidInputError(f"level must be a loguru level name or number, got {level!r}")
    try:
        sink_id = logger.add(_Propagate(), level=level, format="{message}", filter=NAME)
    except ValueError as exc:  # loguru: unknown level name, negative number
        raise InvalidInputError(f"invalid level {level!r}: {exc}") from None
    logger.enable(NAME)
    return sink_id


__all__ = ["NAME", "to_stdlib"]
