"""Short spellings of the :mod:`kdispatch.testing` object factories used across the tests.

The one home of test objects is :func:`kdispatch.testing.make_pod` (and ``make_condition``,
``make_node``, ``make_claim``, ``make_pdb``); these forward to it with the tests' defaults: a
UID derived from the name and a served resourceVersion.
"""

from __future__ import annotations

from typing import Any

from kdispatch.testing.memory import InMemoryApiServer
from kdispatch.testing.memory_objects import make_condition, make_pod

cond = make_condition
"""A pod condition: :func:`kdispatch.testing.make_condition`."""


def pod(
    name: str = "p",
    uid: str | None = None,
    rv: int = 1,
    *,
    namespace: str = "default",
    node: str | None = None,
    conditions: tuple[dict[str, Any], ...] = (),
    nnn: str | None = None,
    terminating: bool = False,
) -> dict[str, Any]:
    """A served Pod: :func:`kdispatch.testing.make_pod` with ``uid`` defaulting to
    ``uid-<name>``, resourceVersion ``rv`` and a ``status.conditions`` list."""
    return make_pod(
        name,
        namespace,
        uid=uid or f"uid-{name}",
        rv=rv,
        node=node,
        conditions=conditions,
        nominated_node_name=nnn,
        terminating=terminating,
    )


def ready_pod(server: InMemoryApiServer, name: str, *, node: str = "n1") -> dict[str, Any]:
    """Creates pod ``name`` (labelled ``app=web``) on ``server``, bound to ``node``, Running and
    Ready (healthy for a PodDisruptionBudget); returns it as stored."""
    return server.create(
        make_pod(
            name,
            labels={"app": "web"},
            node=node,
            phase="Running",
            conditions=[{"type": "Ready", "status": "True"}],
        )
    )
