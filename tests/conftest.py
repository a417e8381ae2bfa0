"""Shared fixtures. Every test is checked for leaked threads, pykka actors and child
processes.

The tests are in layers (docs/testing.md, "The project's own suite"): ``tests/unit`` (pure
rules and data; a test there starts no thread and no process, ``tests/unit/conftest.py``),
``tests/integration`` (actors, executor, dispatchers, in-memory apiserver, informers),
``tests/e2e`` (HTTP, examples, docs, benchmarks, stress and chaos) and ``tests/realapi``. The
helpers below live in ``tests/`` and serve every layer.

Where the one helper for each need lives (reuse it rather than writing another):

* objects: :func:`kdispatch.testing.make_pod` (rv, node, phase, conditions,
  nominated_node_name, terminating), ``make_condition``, ``make_node``, ``make_claim``,
  ``make_pdb``; ``tests/factories.py`` has the short spellings (``pod``, ``cond``),
  ``ready_pod`` and ``user_call`` (a minimal user call class);
* waiting for observable state: :mod:`kdispatch.testing.waiting` (``wait_for``, ``poll``,
  ``until`` on an asyncio loop); for informer events, ``tests/recorders.py``;
* an ``async def`` test: ``tests/aio.py`` (``async_test``, a fresh loop per test);
* wrapping a backend (gate, record, fail, delay requests): ``tests/backends.py``
  (``WrappedBackend`` and its one hook ``around``; ``GatedBackend``, ``RecordingBackend``);
* is the final state right: :mod:`kdispatch.testing.oracle` (``IntentLog``, ``score``);
* custom resources (a namespaced CRD and a cluster-scoped one): the ``kinds`` fixture below;
* a dispatcher configuration without rate limit or backoff: ``tests/configs.py``;
* a dispatcher with informers and their teardown: ``tests/stacks.py``; a backend driven from
  several threads: ``tests/concurrency.py``; a raw HTTP request read: ``tests/rawhttp.py``;
* a command in a child process (a fresh interpreter, a CLI, a build), its output captured:
  ``tests/subprocesses.py`` (``run_command``).

Tests that take more than 5 s are marked ``slow`` (still part of the default run); the
real-apiserver suite is marked ``realapi``.
"""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Iterator
from typing import Any

import pykka
import pytest


def _live_pooled() -> int:
    try:
        from kdispatch.actors.engine.registry import live_pooled_actors
    except ImportError:  # runtime not importable: nothing can have leaked from it
        return 0
    return live_pooled_actors()


@pytest.fixture(autouse=True)
def no_leaks() -> Iterator[None]:
    """Fail the test if it leaves a thread, a pykka actor, a pooled actor or a
    ``multiprocessing`` child process behind.

    Threads started by the test get a bounded ``join`` (proper synchronisation, not a sleep)
    so that threads which are already exiting are not reported.
    """
    before = set(threading.enumerate())
    pooled_before = _live_pooled()
    yield
    leaked = [t for t in threading.enumerate() if t not in before]
    for t in leaked:
        t.join(timeout=5.0)
    names = [t.name for t in leaked if t.is_alive()]
    actors = pykka.ActorRegistry.get_all()
    pooled = _live_pooled() - pooled_before
    assert not names, f"leaked threads: {names}"
    assert not actors, f"leaked pykka actors: {actors}"
    assert pooled <= 0, f"leaked pooled actors: {pooled}"
    children = multiprocessing.active_children()
    assert not children, f"leaked child processes: {children}"


@pytest.fixture
def server() -> Any:
    """A fresh in-memory apiserver (:class:`kdispatch.testing.InMemoryApiServer`)."""
    from kdispatch.testing.memory import InMemoryApiServer

    return InMemoryApiServer()


@pytest.fixture
def kinds() -> Any:
    """The built-in kinds plus two custom resources: ``QuotaClaim`` (namespaced, merge
    patches, as a CRD) and ``ClusterQuota`` (cluster-scoped)."""
    from kdispatch.actors.model.kinds import KindTable

    table = KindTable()
    table.register("QuotaClaim", "example.io", "v1", "quotaclaims")
    table.register("ClusterQuota", "example.io", "v1", "clusterquotas", namespaced=False)
    return table


@pytest.fixture
def dispatcher(server: Any) -> Iterator[Any]:
    """A started :class:`kdispatch.Dispatcher` on ``server`` with ``tests.configs.FAST``,
    stopped at the end of the test."""
    from kdispatch.actors.facade.dispatcher import Dispatcher
    from tests.configs import FAST

    d = Dispatcher(server, FAST).start()
    yield d
    d.stop(timeout=10)


@pytest.fixture
def pod(server: Any) -> dict[str, Any]:
    """Pod ``default/p1`` created on ``server``."""
    from kdispatch.testing import make_pod

    created: dict[str, Any] = server.create(make_pod("p1"))
    return created


@pytest.fixture
def pod_watch(server: Any) -> Iterator[Any]:
    """A watch on ``server``'s Pods from now on, stopped at the end of the test."""
    w = server.watch("Pod")
    yield w
    w.stop()
