"""Build a configuration dataclass tree from mappings or environment variables, generic over
the tree (fields and types are read from the dataclasses). The accepted values and variable
names are in docs/configuration.md; a bad one raises :class:`~kdispatch.InvalidConfigError`
naming the key or the variable. Pure apart from reading the environment it is given.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import os
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

from .config import as_float
from .errors import InvalidConfigError

T = TypeVar("T")

_TRUE = frozenset({"true", "yes", "on", "1"})
_FALSE = frozenset({"false", "no", "off", "0"})
_NONE = frozenset({"", "none", "null"})

OTHER_VARIABLES = frozenset({"KDISPATCH_K8S_CACHE"})
"""Variables with the default prefix that kdispatch reads elsewhere (``kdispatch.testing.envtest``'s
cache directory), not configuration: :func:`load_env` leaves them alone."""


def load_dataclass(cls: type[T], data: Mapping[str, Any], *, where: str = "") -> T:
    """An instance of the dataclass ``cls`` from ``data`` (missing keys keep their defaults).
    Raises :class:`InvalidConfigError`."""
    if not dataclasses.is_dataclass(cls):
        raise InvalidConfigError(f"{cls!r} is not a dataclass")
    if not isinstance(data, Mapping):
        raise InvalidConfigError(
            f"{where or 'config'} must be a mapping, got {type(data).__name__}"
        )
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    hints = get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        path = f"{where}.{key}" if where else str(key)
        if not isinstance(key, str) or key not in fields:
            raise InvalidConfigError(f"unknown config key {path!r}: want one of {sorted(fields)}")
        kwargs[key] = _coerce(hints[key], value, path)
    try:
        return cls(**kwargs)
    except InvalidConfigError as exc:
        raise InvalidConfigError(f"{where}: {exc}" if where else str(exc)) from None


def env_variables(cls: type[Any], prefix: str = "KDISPATCH_") -> dict[str, tuple[str, ...]]:
    """Every environment variable the tree of ``cls`` reads, mapped to its key path. Raises
    :class:`InvalidConfigError` if two paths would share a name."""
    out: dict[str, tuple[str, ...]] = {}

    def walk(klass: type[Any], path: tuple[str, ...]) -> None:
        hints = get_type_hints(klass)
        for f in dataclasses.fields(klass):
            if not f.init:
                continue
            sub = (*path, f.name)
            typ = hints[f.name]
            if isinstance(typ, type) and dataclasses.is_dataclass(typ):
                walk(typ, sub)
                continue
            name = prefix + "_".join(sub).upper()
            if name in out:
                raise InvalidConfigError(
                    f"{'.'.join(out[name])} and {'.'.join(sub)} both map to {name}"
                )
            out[name] = sub

    walk(cls, ())
    return out


def load_env(
    cls: type[T], environ: Mapping[str, str] | None = None, *, prefix: str = "KDISPATCH_"
) -> T:
    """An instance of ``cls`` from the variables of ``environ`` (default ``os.environ``) that
    start with ``prefix``; each must be one of :func:`env_variables`. Raises
    :class:`InvalidConfigError`."""
    if not isinstance(prefix, str) or not prefix:
        raise InvalidConfigError(f"prefix must be a non-empty str, got {prefix!r}")
    env = os.environ if environ is None else environ
    if not isinstance(env, Mapping):
        raise InvalidConfigError(f"environ must be a mapping, got {type(env).__name__}")
    known = env_variables(cls, prefix)
    data: dict[str, Any] = {}
    for name, value in env.items():
        if not isinstance(name, str) or not name.startswith(prefix) or name in OTHER_VARIABLES:
            continue
        path = known.get(name)
        if path is None:
            raise InvalidConfigError(f"unknown variable {name}: want one of {sorted(known)}")
        if not isinstance(value, str):
            raise InvalidConfigError(f"{name} must be a str, got {type(value).__name__}")
        node = data
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
    try:
        return load_dataclass(cls, data)
    except InvalidConfigError as exc:
        raise InvalidConfigError(f"from the environment ({prefix}*): {exc}") from None


# --------------------------------------------------------------------------- one value


def _coerce(typ: Any, value: Any, path: str) -> Any:
    origin = get_origin(typ)
    if origin is Union or origin is types.UnionType:
        args = get_args(typ)
        if type(None) in args:
            if value is None or (isinstance(value, str) and value.strip().lower() in _NONE):
                return None
            rest = tuple(a for a in args if a is not type(None))
            typ = rest[0] if len(rest) == 1 else Union[rest]  # noqa: UP007 - built at run time
            return _coerce(typ, value, path)
        for arg in args:
            try:
                return _coerce(arg, value, path)
            except InvalidConfigError:
                continue
        raise InvalidConfigError(f"{path}: {value!r} matches none of {typ}")
    if origin is Literal:
        for choice in get_args(typ):
            if value == choice or (isinstance(value, str) and str(choice) == value):
                return choice
        raise InvalidConfigError(f"{path} must be one of {list(get_args(typ))}, got {value!r}")
    if typ is Any or typ is typing.Any:
        return value
    if isinstance(typ, type) and dataclasses.is_dataclass(typ):
        if isinstance(value, typ):
            return value
        return load_dataclass(typ, value, where=path)
    if isinstance(typ, type) and issubclass(typ, enum.Enum):
        for member in typ:
            if value is member or value in (member.value, member.name):
                return member
        raise InvalidConfigError(f"{path} must be one of {[m.value for m in typ]}, got {value!r}")
    if typ is bool:
        return _bool(value, path)
    if typ is int:
        return _int(value, path)
    if typ is float:
        return _float(value, path)
    if typ is str:
        if not isinstance(value, str):
            raise InvalidConfigError(f"{path} must be a str, got {value!r}")
        return value
    raise InvalidConfigError(f"{path}: fields of type {typ!r} cannot be loaded")


def _bool(value: Any, path: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
    raise InvalidConfigError(f"{path} must be a bool (true/false), got {value!r}")


def _int(value: Any, path: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            return int(value.strip(), 10)
        except ValueError:
            pass
    raise InvalidConfigError(f"{path} must be an int, got {value!r}")


def _float(value: Any, path: str) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        out = as_float(path, value)
    elif isinstance(value, str):
        try:
            out = float(value.strip())
        except ValueError:
            raise InvalidConfigError(f"{path} must be a number, got {value!r}") from None
    else:
        raise InvalidConfigError(f"{path} must be a number, got {value!r}")
    if math.isnan(out):
        raise InvalidConfigError(f"{path} must not be NaN")
    return out
