"""griffe extension for the API reference (mkdocs.yml loads it through mkdocstrings).

* A docstring's reStructuredText literal block (``Typical use::`` and an indented block) becomes
  a fenced code block: Python when it parses as Python, plain text otherwise; the ``::`` reads
  as ``:`` (or disappears, after a space or on a line of its own), as in reST.
* A class whose constructor the static analysis cannot see gets one, so the reference shows how
  to build it: a NamedTuple takes its fields; a TypedDict its keys, as keyword arguments; an
  exception that inherits the builtin constructor takes ``*args: object``; a standard
  ``concurrent.futures.Future`` takes nothing.
* A module attribute bound to a method of a module-level instance (``register =
  DEFAULT_KINDS.register``) is shown as the function it is, with the method's signature.
"""

from __future__ import annotations

import ast
import builtins
import textwrap
from collections.abc import Callable
from typing import Any

import griffe

_FENCE = "```"


def literal_blocks(text: str) -> str:
    """``text`` with every reST literal block (``...::`` and an indented block) fenced."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        head = line.rstrip()
        j = i + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        indent = len(line) - len(line.lstrip())
        if (
            not head.endswith("::")
            or j >= len(lines)
            or len(lines[j]) - len(lines[j].lstrip()) <= indent
        ):
            out.append(line)
            i += 1
            continue
        block: list[str] = []
        while j < len(lines) and (
            not lines[j].strip() or len(lines[j]) - len(lines[j].lstrip()) > indent
        ):
            block.append(lines[j])
            j += 1
        while block and not block[-1].strip():
            block.pop()
        code = textwrap.dedent("\n".join(block))
        stem = head[:-2]
        if stem.strip():
            out.append(stem.rstrip() if stem.endswith(" ") else stem + ":")
            out.append("")
        pad = " " * indent
        fence = [f"{pad}{_FENCE}{_language(code)}"]
        fence += [f"{pad}{row}" if row else "" for row in code.split("\n")]
        out += [*fence, f"{pad}{_FENCE}", ""]
        i = j
    return "\n".join(out)


def _language(code: str) -> str:
    try:
        ast.parse(code)
    except SyntaxError:
        return "text"
    return "python"


def _bases(cls: griffe.Class) -> list[str]:
    paths = []
    for base in cls.bases:
        path = base.canonical_path if isinstance(base, griffe.Expr) else str(base)
        paths.append(path)
    return paths


def _builtin_exception(path: str) -> bool:
    name = path.removeprefix("builtins.")
    found = getattr(builtins, name, None)
    return "." not in name and isinstance(found, type) and issubclass(found, BaseException)


def _inherits(cls: griffe.Class, outside: Callable[[str], bool]) -> bool:
    """Whether ``cls`` or one of its analysed ancestors has a base ``outside`` accepts."""
    for path in _bases(cls):
        if outside(path):
            return True
        try:
            parent = cls.modules_collection.get_member(path)
            if isinstance(parent, griffe.Alias):
                parent = parent.final_target
        except (KeyError, griffe.AliasResolutionError):
            continue  # defined outside the analysed packages
        if isinstance(parent, griffe.Class) and _inherits(parent, outside):
            return True
    return False


def _standard_future(path: str) -> bool:
    return path.partition("[")[0] == "concurrent.futures.Future"


def _fields(cls: griffe.Class) -> list[griffe.Attribute]:
    return [
        m
        for m in cls.members.values()
        if isinstance(m, griffe.Attribute)
        and m.annotation is not None
        and not m.name.startswith("_")
    ]


def _constructor(cls: griffe.Class) -> list[griffe.Parameter] | None:
    """The parameters of the constructor ``cls`` gets from outside the analysed code."""
    bases = _bases(cls)
    if "typing.NamedTuple" in bases:
        return [
            griffe.Parameter(
                f.name,
                annotation=f.annotation,
                kind=griffe.ParameterKind.positional_or_keyword,
                default=f.value,
                docstring=f.docstring,
            )
            for f in _fields(cls)
        ]
    if "typing.TypedDict" in bases:
        total = str(cls.keywords.get("total", "True")) != "False"
        return [
            griffe.Parameter(
                f.name,
                annotation=f.annotation,
                kind=griffe.ParameterKind.keyword_only,
                default=None if total else "...",
                docstring=f.docstring,
            )
            for f in _fields(cls)
        ]
    if _inherits(cls, _builtin_exception):
        args = griffe.ParameterKind.var_positional
        return [griffe.Parameter("args", annotation="object", kind=args)]
    if _inherits(cls, _standard_future):
        return []  # concurrent.futures.Future() takes nothing
    return None


def _modules(pkg: griffe.Module) -> list[griffe.Module]:
    found = [pkg]
    for member in pkg.members.values():
        if isinstance(member, griffe.Module) and not member.is_alias:
            found += _modules(member)
    return found


def _classes(obj: griffe.Module | griffe.Class) -> list[griffe.Class]:
    found: list[griffe.Class] = []
    for member in obj.members.values():
        if member.is_alias:
            continue
        if isinstance(member, griffe.Class):
            found.append(member)
            found += _classes(member)
        elif isinstance(member, griffe.Module):
            found += _classes(member)
    return found


def _bound_method(attr: griffe.Attribute) -> griffe.Function | None:
    """The method ``attr`` is bound to (``name = instance.method``), else None."""
    value = attr.value
    module = attr.parent
    if not isinstance(value, griffe.ExprAttribute) or not isinstance(module, griffe.Module):
        return None
    owner, _, method = str(value).partition(".")
    instance = module.members.get(owner)
    if not isinstance(instance, griffe.Attribute) or "." in method:
        return None
    call = instance.value
    if not isinstance(call, griffe.ExprCall):
        return None
    try:
        cls = module.modules_collection.get_member(call.function.canonical_path)
    except (KeyError, AttributeError):
        return None
    found = cls.members.get(method) if isinstance(cls, griffe.Class) else None
    return found if isinstance(found, griffe.Function) else None


def _as_function(attr: griffe.Attribute, method: griffe.Function) -> griffe.Function:
    parameters = list(method.parameters)[1:]  # without self
    function = griffe.Function(
        attr.name,
        lineno=attr.lineno,
        endlineno=attr.endlineno,
        parameters=griffe.Parameters(*parameters),
        returns=method.returns,
        docstring=attr.docstring,
    )
    if function.docstring is not None:
        function.docstring.parent = function
    return function


class KdispatchReference(griffe.Extension):
    """Literal blocks fenced; constructors the static analysis misses, added."""

    def on_object(self, *, obj: griffe.Object, **_: Any) -> None:
        if obj.docstring is not None and "::" in obj.docstring.value:
            obj.docstring.value = literal_blocks(obj.docstring.value)

    def on_package(self, *, pkg: griffe.Module, **_: Any) -> None:
        for module in _modules(pkg):
            for attr in [m for m in module.members.values() if isinstance(m, griffe.Attribute)]:
                method = _bound_method(attr)
                if method is not None:
                    module.set_member(attr.name, _as_function(attr, method))
        for cls in _classes(pkg):
            if "__init__" in cls.all_members:
                continue
            parameters = _constructor(cls)
            if parameters is None:
                continue
            init = griffe.Function(
                "__init__",
                lineno=0,
                endlineno=0,
                parent=cls,
                parameters=griffe.Parameters(
                    griffe.Parameter("self", kind=griffe.ParameterKind.positional_or_keyword),
                    *parameters,
                ),
                returns="None",
            )
            cls.set_member("__init__", init)
