"""mkdocs hook: the docstrings' Sphinx roles (:class:`~kdispatch.Dispatcher`, :meth:`stop`) read
as plain code in the API reference (``Dispatcher``, ``stop``), not as role markup."""

from __future__ import annotations

import re
from typing import Any

_ROLE = re.compile(r":(?:attr|class|data|exc|func|meth|mod|obj):(?=<code>)")
_SHORT = re.compile(r"<code>~(?:\w+\.\s*)*(\w+)</code>")


def on_page_content(html: str, **_: Any) -> str:
    """Drop the role prefix before each code span, and shorten ``~a.b.C`` to ``C``."""
    return _SHORT.sub(r"<code>\1</code>", _ROLE.sub("", html))
