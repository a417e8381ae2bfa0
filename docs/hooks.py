"""mkdocs hook: the docstrings' Sphinx roles (:class:`~kdispatch.Dispatcher`, :meth:`stop`) read
as plain code in the API reference (``Dispatcher``, ``stop``), not as role markup; a role with
an explicit target (:meth:`Dispatcher.stats <kdispatch.Dispatcher.stats>`) reads as its text.

A type in a signature that the reference does not document (an alias such as ``Json``) is shown
by its name alone: the tooltip would name the module that defines it, an internal one."""

from __future__ import annotations

import re
from typing import Any

_ROLE = re.compile(r":(?:attr|class|data|exc|func|meth|mod|obj):(?=<code>)")
_SHORT = re.compile(r"<code>~\.?(?:\w+\.\s*)*(\w+)</code>")
_TARGET = re.compile(r"<code>([^<&]+?)\s+&lt;\w+(?:\.\w+)+&gt;</code>")
_UNRESOLVED = re.compile(r'<span title="[\w.()]+">')


def on_page_content(html: str, **_: Any) -> str:
    """Drop the role prefix before each code span, shorten ``~a.b.C`` to ``C`` and
    ``text <target>`` to ``text``."""
    return _TARGET.sub(r"<code>\1</code>", _SHORT.sub(r"<code>\1</code>", _ROLE.sub("", html)))


def on_post_page(output: str, **_: Any) -> str:
    """Drop the tooltips of the types the reference does not show (cross-references are
    resolved by then)."""
    return _UNRESOLVED.sub("<span>", output)
