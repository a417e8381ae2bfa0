"""Small helpers shared by the example programs (config checks, configs from the command line,
verbose logging)."""

from __future__ import annotations

import argparse
import inspect
import math
import re
import sys
from collections.abc import Callable, Mapping
from typing import TypeVar

from loguru import logger

from kdispatch import InvalidInputError

C = TypeVar("C")


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


def add_config_options(
    p: argparse.ArgumentParser, defaults: object, *names: str, helps: Mapping[str, str] = {}
) -> None:
    """For each of ``names`` (fields of the config ``defaults``; none given: the keys of
    ``helps``), in order, an option ``--the-field`` of the field's type with its default, which
    :func:`config_from_args` finds again; ``helps``: the help texts of some."""
    for name in names or helps:
        value = getattr(defaults, name)
        flag = "--" + name.replace("_", "-")
        p.add_argument(flag, type=type(value), default=value, help=helps.get(name))


def config_from_args(make: Callable[..., C], args: argparse.Namespace, **given: object) -> C:
    """``make(...)`` (a config class) called with ``given`` and, for each of its other
    parameters, the parsed option of the same name where there is one; a parameter without an
    option keeps its default. Raises what ``make`` raises."""
    options = vars(args)
    names = [n for n in inspect.signature(make).parameters if n in options and n not in given]
    return make(**{n: options[n] for n in names}, **given)


def option_names(p: argparse.ArgumentParser, **fields: str) -> dict[str, str]:
    """What the user types for each config field: the destination of every option that is the
    only one to set it → its long spelling (``max_seconds`` → ``--max-seconds``), and
    ``fields``, the fields set from an option of another name
    (``backoff_initial="--pod-initial-backoff-seconds"``). Pure."""
    spellings: dict[str, list[str]] = {}
    for action in p._actions:
        long = [o for o in action.option_strings if o.startswith("--")]
        if long and action.dest not in (argparse.SUPPRESS, "help"):
            spellings.setdefault(action.dest, []).append(long[0])
    return {**{d: s[0] for d, s in spellings.items() if len(s) == 1}, **fields}


def in_option_names(message: str, options: Mapping[str, str]) -> str:
    """``message`` with every config field it names (a whole word: ``backoff_initial``, not
    part of ``'pod_binding'`` or of ``--dispatcher-process``) spelled as the option that sets
    it (``--pod-initial-backoff-seconds``). Pure."""
    if not options:
        return message
    names = "|".join(sorted(map(re.escape, options), key=len, reverse=True))
    pattern = re.compile(rf"(?<![\w'\"-])({names})(?![\w'\"-])")
    return pattern.sub(lambda m: options[m.group(1)], message)


def configure(
    build: Callable[[], C], *, verbose: bool, options: Mapping[str, str] | None = None
) -> C | int:
    """The run's config from ``build()``, or exit status 2 after saying on stderr why the
    options are invalid (:class:`InvalidInputError`), each config field the reason names
    spelled as the option in ``options`` (field → option, :func:`option_names`) that sets it;
    turns on :func:`enable_verbose_logs` when ``verbose``."""
    try:
        cfg = build()
    except InvalidInputError as err:
        print(f"error: {in_option_names(str(err), options or {})}", file=sys.stderr)
        return 2
    if verbose:
        enable_verbose_logs()
    return cfg
