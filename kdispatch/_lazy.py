"""Names a package exports from submodules imported on first use (PEP 562): pytest imports
``kdispatch`` for the envtest plugin in every run, and the dispatcher's runtime and the
Kubernetes client cost about a second. mypy sees the real imports (``TYPE_CHECKING``).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping


def lazy_exports(package: str, modules: Mapping[str, tuple[str, ...]]) -> Callable[[str], object]:
    """A module ``__getattr__`` for ``package`` that imports the names of ``modules``
    (relative module → names it exports) on first access and keeps them on the package.
    Any thread (the import lock serialises the imports)."""
    where = {name: module for module, names in modules.items() for name in names}

    def __getattr__(name: str) -> object:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
