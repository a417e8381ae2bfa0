"""``ObjectList``: what ``list()`` returns on every backend (:class:`KubernetesBackend` and the
in-memory apiserver of :mod:`kdispatch.testing`), so code that reads a list back runs on both.

Pure value type: no threads, no client.
"""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = ["ObjectList"]


class ObjectList(NamedTuple):
    """One page of a list: the objects (``kind``/``apiVersion`` filled in), the list's
    resourceVersion (to watch from), and the token of the next page (None on the last).

    ``page.items``, ``page.resource_version``, ``page.continue_token``; it also unpacks:
    ``items, rv, token = backend.list("Pod")``."""

    items: list[dict[str, Any]]
    resource_version: str
    continue_token: str | None
